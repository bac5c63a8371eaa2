// Package getopt parses command lines the way glibc's getopt_long(3) does,
// for the softroce commands that take the real tools' options (the
// pingpong tools, perftest, rping): short options that cluster, long
// options that may be abbreviated, options after operands. It also writes
// the synopsis of an option table, so that a command's usage is derived
// from the table it parses with.
package getopt

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Option describes one command-line option the way a struct option entry
// and an optstring letter do for getopt_long.
type Option struct {
	Short  byte   // 0: long only
	Long   string // "": short only
	HasArg bool
	Key    string // name reported to the caller (long name, or the letter)
	// Arg is the argument's placeholder in a synopsis (default: the long
	// name in capitals, or ARG for a short-only option).
	Arg string
}

// Opt is one option occurrence, in command-line order.
type Opt struct {
	Key string
	Arg string
}

// Parse parses args (without argv[0]) like glibc's getopt_long in its
// default permuting mode: options may follow operands, "--" ends option
// parsing, short options cluster ("-ec", "-n5"), an argument may be glued or
// the next word, and long options take "=value" or the next word and may be
// abbreviated to any unique prefix. A lone "-" is an operand. Errors carry
// getopt's message prefixed with tool and wrap EINVAL.
func Parse(tool string, opts []Option, args []string) ([]Opt, []string, error) {
	var out []Opt
	var operands []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			operands = append(operands, args[i+1:]...)
			return out, operands, nil
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			o, err := findLong(tool, opts, name)
			if err != nil {
				return nil, nil, err
			}
			switch {
			case o.HasArg && hasVal:
			case o.HasArg:
				if i+1 >= len(args) {
					return nil, nil, fmt.Errorf("%s: option '--%s' requires an argument: %w", tool, o.Long, unix.EINVAL)
				}
				i++
				val = args[i]
			case hasVal:
				return nil, nil, fmt.Errorf("%s: option '--%s' doesn't allow an argument: %w", tool, o.Long, unix.EINVAL)
			}
			out = append(out, Opt{Key: o.Key, Arg: val})
		case len(a) > 1 && a[0] == '-':
			for j := 1; j < len(a); j++ {
				o := findShort(opts, a[j])
				if o == nil {
					return nil, nil, fmt.Errorf("%s: invalid option -- '%c': %w", tool, a[j], unix.EINVAL)
				}
				if !o.HasArg {
					out = append(out, Opt{Key: o.Key})
					continue
				}
				val := a[j+1:]
				if val == "" {
					if i+1 >= len(args) {
						return nil, nil, fmt.Errorf("%s: option requires an argument -- '%c': %w", tool, a[j], unix.EINVAL)
					}
					i++
					val = args[i]
				}
				out = append(out, Opt{Key: o.Key, Arg: val})
				break
			}
		default:
			operands = append(operands, a)
		}
	}
	return out, operands, nil
}

func findShort(opts []Option, c byte) *Option {
	for i := range opts {
		if opts[i].Short != 0 && opts[i].Short == c {
			return &opts[i]
		}
	}
	return nil
}

func findLong(tool string, opts []Option, name string) (*Option, error) {
	var match *Option
	for i := range opts {
		if opts[i].Long == "" {
			continue
		}
		if opts[i].Long == name {
			return &opts[i], nil
		}
		if name != "" && strings.HasPrefix(opts[i].Long, name) {
			if match != nil {
				return nil, fmt.Errorf("%s: option '--%s' is ambiguous: %w", tool, name, unix.EINVAL)
			}
			match = &opts[i]
		}
	}
	if match == nil {
		return nil, fmt.Errorf("%s: unrecognized option '--%s': %w", tool, name, unix.EINVAL)
	}
	return match, nil
}

// Synopsis returns one bracketed entry per option of opts, in table order:
// "[-p|--port PORT]", "[-e|--events]", "[--use-srq]", "[-d]". An option
// that takes an argument shows its long name in capitals as the
// placeholder unless the option names its own (ARG for a short-only
// option).
func Synopsis(opts []Option) []string {
	out := make([]string, 0, len(opts))
	for _, o := range opts {
		var names []string
		if o.Short != 0 {
			names = append(names, "-"+string(o.Short))
		}
		if o.Long != "" {
			names = append(names, "--"+o.Long)
		}
		s := strings.Join(names, "|")
		if o.HasArg {
			s += " " + argName(o)
		}
		out = append(out, "["+s+"]")
	}
	return out
}

// argName is the placeholder of o's argument: o.Arg, its long name in
// capitals ("--ib-dev" takes IB_DEV), or ARG for a short-only option.
func argName(o Option) string {
	if o.Arg != "" {
		return o.Arg
	}
	if o.Long == "" {
		return "ARG"
	}
	return strings.ToUpper(strings.NewReplacer("-", "_").Replace(o.Long))
}
