package oob

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

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
