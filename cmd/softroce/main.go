// Command softroce is a userspace Soft-RoCE (RoCEv2) emulator and the tools
// around it: a QP state-machine explainer, a RoCEv2 capture decoder, and (as
// the emulator grows) loopback, pingpong and perf runs against real peers.
//
// Each subcommand lives in its own file (cmd_NAME.go) and registers itself
// with register, so the list printed by "softroce help" is the list of files.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/softroce/softroce/workload"
)

// command is one softroce subcommand.
type command struct {
	name    string // as typed on the command line
	summary string // one line for "softroce help"
	usage   string // the argument synopsis, after the name
	// run executes the command. It writes results to stdout and
	// diagnostics to stderr. A returned *exitError sets the exit status
	// without printing anything more; any other error is printed.
	run func(args []string, stdout, stderr io.Writer) error
}

// exitError ends a command with a status but no message (for example
// "decode" found a bad ICRC and has already said so).
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

var commands = map[string]command{}

// register adds c to the command table; it panics on a duplicate name, a
// programming error caught by any test run.
func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("softroce: duplicate command " + c.name)
	}
	commands[c.name] = c
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches args to a subcommand and returns the process exit status:
// 0 on success, 1 when the command failed, 2 on a usage error.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "softroce: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	err := c.run(args[1:], stdout, stderr)
	var ee *exitError
	var wce *workload.WCError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &wce):
		// A failed completion: exactly the real tool's text.
		fmt.Fprintln(stderr, wce.Error())
		return 1
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		fmt.Fprintf(stderr, "softroce %s: %v\n", c.name, err)
		return 1
	}
}

// errUsage reports that the command line was wrong; the flag package (or
// the command) has already printed why.
var errUsage = errors.New("usage")

// newFlagSet returns a flag set for command c that prints its usage to
// stderr and returns errors instead of exiting.
func newFlagSet(c string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("softroce "+c, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		cmd := commands[c]
		fmt.Fprintf(stderr, "usage: softroce %s %s\n\n%s\n", c, cmd.usage, cmd.summary)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args into fs, mapping flag errors to errUsage.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	return nil
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "softroce: a userspace Soft-RoCE (RoCEv2) emulator")
	fmt.Fprintln(w, "\nusage: softroce COMMAND [flags] [args]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'softroce COMMAND -h' for a command's flags.")
}
