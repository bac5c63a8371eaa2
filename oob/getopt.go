package oob

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// option describes one command-line option the way a struct option entry
// and an optstring letter do for getopt_long(3).
type option struct {
	short  byte   // 0: long only
	long   string // "": short only
	hasArg bool
	key    string // name reported to the caller (long name, or the letter)
}

// parsedOpt is one option occurrence, in command-line order.
type parsedOpt struct {
	key string
	arg string
}

// getoptLong parses args (without argv[0]) like glibc's getopt_long in its
// default permuting mode: options may follow operands, "--" ends option
// parsing, short options cluster ("-ec", "-n5"), an argument may be glued or
// the next word, and long options take "=value" or the next word and may be
// abbreviated to any unique prefix. Errors wrap EINVAL, where the tools
// print their usage and exit 1.
func getoptLong(tool string, opts []option, args []string) ([]parsedOpt, []string, error) {
	var out []parsedOpt
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
			case o.hasArg && hasVal:
			case o.hasArg:
				if i+1 >= len(args) {
					return nil, nil, fmt.Errorf("%s: option '--%s' requires an argument: %w", tool, o.long, unix.EINVAL)
				}
				i++
				val = args[i]
			case hasVal:
				return nil, nil, fmt.Errorf("%s: option '--%s' doesn't allow an argument: %w", tool, o.long, unix.EINVAL)
			}
			out = append(out, parsedOpt{key: o.key, arg: val})
		case len(a) > 1 && a[0] == '-':
			for j := 1; j < len(a); j++ {
				o := findShort(opts, a[j])
				if o == nil {
					return nil, nil, fmt.Errorf("%s: invalid option -- '%c': %w", tool, a[j], unix.EINVAL)
				}
				if !o.hasArg {
					out = append(out, parsedOpt{key: o.key})
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
				out = append(out, parsedOpt{key: o.key, arg: val})
				break
			}
		default:
			operands = append(operands, a)
		}
	}
	return out, operands, nil
}

func findShort(opts []option, c byte) *option {
	for i := range opts {
		if opts[i].short != 0 && opts[i].short == c {
			return &opts[i]
		}
	}
	return nil
}

func findLong(tool string, opts []option, name string) (*option, error) {
	var match *option
	for i := range opts {
		if opts[i].long == "" {
			continue
		}
		if opts[i].long == name {
			return &opts[i], nil
		}
		if name != "" && strings.HasPrefix(opts[i].long, name) {
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

// parseCInt parses s like strtol(s, NULL, 0) but strictly: an optional
// sign, then "0x"/"0X" hex, a leading "0" octal, or decimal, and nothing
// after the digits. The tools accept trailing junk (and read "abc" as 0);
// softroce rejects it with EINVAL so a typo is not silently a zero.
func parseCInt(tool, flag, s string, bits int) (int64, error) {
	v, err := strconv.ParseInt(cNumber(s), 0, bits)
	if err != nil || s == "" {
		return 0, fmt.Errorf("%s: %s: invalid number %q: %w", tool, flag, s, unix.EINVAL)
	}
	return v, nil
}

// parseCUint is parseCInt for the strtoul options.
func parseCUint(tool, flag, s string, bits int) (uint64, error) {
	v, err := strconv.ParseUint(cNumber(s), 0, bits)
	if err != nil || s == "" {
		return 0, fmt.Errorf("%s: %s: invalid number %q: %w", tool, flag, s, unix.EINVAL)
	}
	return v, nil
}

// cNumber rewrites C's octal spelling ("017") into Go's ("0o17") and
// rejects Go-only spellings (underscores, 0b, 0o) by making them invalid.
func cNumber(s string) string {
	if strings.ContainsAny(s, "_oObB") && !strings.HasPrefix(strings.TrimLeft(s, "+-"), "0x") &&
		!strings.HasPrefix(strings.TrimLeft(s, "+-"), "0X") {
		return "invalid"
	}
	if strings.Contains(s, "_") {
		return "invalid"
	}
	sign := ""
	body := s
	if len(body) > 0 && (body[0] == '-' || body[0] == '+') {
		sign, body = body[:1], body[1:]
	}
	if len(body) > 1 && body[0] == '0' && body[1] != 'x' && body[1] != 'X' {
		return sign + "0o" + body[1:]
	}
	return s
}
