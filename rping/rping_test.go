package rping

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"
)

// TestParseFlags: rping's getopt string with clustered flags and glued
// arguments, operands ignored, its checks and messages.
func TestParseFlags(t *testing.T) {
	o, err := ParseFlags([]string{"-cvV", "-a", "10.0.0.2", "-p7000", "-C", "3", "extra", "-S", "100", "--dev=rxe1"})
	if err != nil {
		t.Fatal(err)
	}
	want := &Options{Client: true, Addr: netip.MustParseAddr("10.0.0.2"), Port: 7000, Count: 3, Size: 100,
		Verbose: true, Validate: true, Dev: "rxe1",
		echo: []string{"client", "verbose", "validate data", "port 7000", "count 3", "size 100"}}
	if !reflect.DeepEqual(o, want) {
		t.Errorf("got %+v\nwant %+v", o, want)
	}
	for _, tc := range []struct {
		args  []string
		msg   string
		usage bool
	}{
		{[]string{"-v"}, "rping: -s or -c required", true},
		{[]string{"-c"}, "rping: the client needs -a addr", true},
		{[]string{"-s", "-x"}, "rping: invalid option -- 'x'", true},
		{[]string{"-s", "-S", "25"}, "Invalid size 25 (valid range is 26 to 65536)", false},
		{[]string{"-s", "-C", "-1"}, "Invalid count -1", false},
		{[]string{"-s", "-q"}, "softroce rping: -q is not supported: operation not supported", false},
	} {
		_, err := ParseFlags(tc.args)
		var ue *UsageError
		if err == nil || err.Error() != tc.msg || errors.As(err, &ue) != tc.usage {
			t.Errorf("%q: %v (usage error %v), want %q (usage %v)", tc.args, err, errors.As(err, &ue), tc.msg, tc.usage)
		}
	}
}
