// Command softroce is a userspace Soft-RoCE (RoCEv2) emulator and the tools
// around it: the real tools' workloads from an emulated HCA on a real
// segment (pingpong, perf, rping), in-process runs with injected faults
// (loopback), the device's attributes and counters (devinfo, stats), the
// QP state machine (explain, dot), what runs exercised of it (coverage), a
// RoCEv2 capture decoder (decode) and a benchmark (bench).
//
// Each subcommand lives in its own file (cmd_NAME.go) and registers itself
// with register, so the list printed by "softroce help" is the list of files.
// A command runs in an env: its arguments, its streams and the hooks a test
// sets; nothing a command reads is a package global.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/softroce/softroce/node"
	"github.com/softroce/softroce/workload"
)

// command is one softroce subcommand.
type command struct {
	name    string // as typed on the command line
	summary string // one line for "softroce help"
	// operands is the synopsis of the operands, after the flags
	// ("CUR NEXT [MASK...]"); the flags' part is derived from the flag set.
	operands string
	// help, if set, prints the command's help (commands that parse the
	// real tools' options print their option tables); otherwise the
	// command runs with "-h" and its flag set prints the usage.
	help func(e *env)
	// run executes the command. It writes results to e.stdout and
	// diagnostics to e.stderr. A returned *exitError sets the exit status
	// without printing anything more; any other error is printed.
	run func(e *env) error
}

// env is what a command runs in: its arguments, its output streams and
// the hooks tests use to put two in-process commands on the two ends of an
// in-memory link.
type env struct {
	args           []string // after the command name
	stdout, stderr io.Writer
	ctx            context.Context // nil: context.Background()
	hooks
}

// context returns the command's context: it bounds the waits of setting
// up (the node's duplicate address detection).
func (e *env) context() context.Context {
	if e.ctx == nil {
		return context.Background()
	}
	return e.ctx
}

// hooks are the points where a test replaces what the command would do on
// a real machine. The zero value is the real behaviour.
type hooks struct {
	// openNode builds the softroce host from the link flags (default:
	// lf.open).
	openNode func(lf *linkFlags, stderr io.Writer) (*node.Node, error)
	// serverReady is called when a pingpong, perf or rping server listens.
	serverReady func(addr net.Addr)
	// dialTimeout bounds how long a client keeps trying to reach a server
	// that is not listening yet (default 5 s).
	dialTimeout time.Duration
	// giveUp, closed, ends a server's wait for its client (the real tools
	// wait for ever): a test closes it when the client failed.
	giveUp <-chan struct{}
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
	return runWith(hooks{}, args, stdout, stderr)
}

// runWith is run with the hooks h.
func runWith(h hooks, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" && len(args) == 1 {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	name, help := args[0], false
	if name == "help" {
		name, help = args[1], true
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "softroce: unknown command %q\n\n", name)
		usage(stderr)
		return 2
	}
	e := &env{args: args[1:], stdout: stdout, stderr: stderr, hooks: h}
	if help || wantsHelp(e.args) {
		return c.printHelp(e)
	}
	err := c.run(e)
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

// wantsHelp reports whether args (before any "--") ask for help: -h,
// -help or --help, anywhere, as every softroce command promises.
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// printHelp writes c's help to stdout and returns exit status 0.
func (c command) printHelp(e *env) int {
	e.args = []string{"-h"}
	e.stderr = e.stdout
	if c.help != nil {
		c.help(e)
		return 0
	}
	if err := c.run(e); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(e.stdout, "softroce %s: %v\n", c.name, err)
		return 1
	}
	return 0
}

// errUsage reports that the command line was wrong; the flag package (or
// the command) has already printed why.
var errUsage = errors.New("usage")

// newFlagSet returns a flag set for command name that prints its usage to
// e.stderr and returns errors instead of exiting. The usage is derived from
// the flags defined on it: "usage: softroce NAME [--flag ARG]... OPERANDS",
// the summary, and one line per flag.
func newFlagSet(e *env, name string) *flag.FlagSet {
	fs := flag.NewFlagSet("softroce "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		cmd := commands[name]
		w := e.stderr
		syn := append([]string{"usage: softroce", name}, flagSynopsis(fs)...)
		if cmd.operands != "" {
			syn = append(syn, cmd.operands)
		}
		fmt.Fprintf(w, "%s\n\n%s\n\nflags:\n", wrapWords(syn, 80, "\t"), cmd.summary)
		printFlags(w, fs)
	}
	return fs
}

// flagName is how a flag is written in usage texts: -x for a one-letter
// flag, --name for the others (Go's flag package accepts both spellings).
func flagName(f *flag.Flag) string {
	if len(f.Name) == 1 {
		return "-" + f.Name
	}
	return "--" + f.Name
}

// isBoolFlag reports whether f takes no value.
func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// flagSynopsis returns "[--name ARG]" (or "[--name]" for a boolean) for
// every flag of fs, in name order.
func flagSynopsis(fs *flag.FlagSet) []string {
	var out []string
	fs.VisitAll(func(f *flag.Flag) {
		s := flagName(f)
		if !isBoolFlag(f) {
			arg, _ := flag.UnquoteUsage(f)
			s += " " + strings.ToUpper(arg)
		}
		out = append(out, "["+s+"]")
	})
	return out
}

// printFlags writes one entry per flag of fs: the flag, its argument, its
// usage and its default when that is not the zero value.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		arg, help := flag.UnquoteUsage(f)
		s := "  " + flagName(f)
		if !isBoolFlag(f) {
			s += " " + strings.ToUpper(arg)
		}
		if def := f.DefValue; def != "" && def != "0" && def != "false" && def != "0s" && def != "[]" {
			help += fmt.Sprintf(" (default %s)", def)
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", s, strings.ReplaceAll(help, "\n", "\n    \t"))
	})
}

// wrapWords joins words into lines of at most width columns (a tab counts
// 8), the lines after the first starting with indent.
func wrapWords(words []string, width int, indent string) string {
	var b strings.Builder
	col := 0
	for _, w := range words {
		if col > 0 && col+1+len(w) > width {
			b.WriteString("\n" + indent)
			col = 8
		} else if col > 0 {
			b.WriteByte(' ')
			col++
		}
		b.WriteString(w)
		col += len(w)
	}
	return b.String()
}

// parseFlags parses args into fs and returns the operands. Flags may come
// before, between and after the operands ("explain RTR RTS STATE -type
// UD"); everything after "--" is an operand. Flag errors become errUsage
// (the flag package has printed the reason and the usage).
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var tail []string
	for i, a := range args {
		if a == "--" {
			args, tail = args[:i], args[i+1:]
			break
		}
	}
	var operands []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, errUsage
		}
		if fs.NArg() == 0 {
			break
		}
		operands = append(operands, fs.Arg(0))
		args = fs.Args()[1:]
	}
	return append(operands, tail...), nil
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
	fmt.Fprintln(w, "\nRun 'softroce COMMAND -h' or 'softroce help COMMAND' for a command's flags.")
}
