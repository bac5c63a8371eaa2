package getopt

import (
	"errors"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"
)

var testOpts = []Option{
	{Short: 'p', Long: "port", HasArg: true, Key: "p"},
	{Short: 'e', Long: "events", Key: "e"},
	{Short: 'c', Key: "c"},
	{Long: "use-srq", Key: "use-srq"},
	{Short: 'a', HasArg: true, Key: "a", Arg: "addr"},
	{Long: "ib-dev", HasArg: true, Key: "d"},
}

func TestParse(t *testing.T) {
	opts, operands, err := Parse("tool", testOpts, []string{"srv", "-ecp0x10", "--use", "--ib-dev=rxe0", "-a", "1.2.3.4", "--", "-e"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Opt{{"e", ""}, {"c", ""}, {"p", "0x10"}, {"use-srq", ""}, {"d", "rxe0"}, {"a", "1.2.3.4"}}
	if !reflect.DeepEqual(opts, want) || !reflect.DeepEqual(operands, []string{"srv", "-e"}) {
		t.Errorf("opts %v operands %q", opts, operands)
	}
	for _, bad := range [][]string{{"-x"}, {"--nope"}, {"-p"}, {"--events=1"}, {"--port"}} {
		if _, _, err := Parse("tool", testOpts, bad); !errors.Is(err, unix.EINVAL) {
			t.Errorf("%q: err %v, want EINVAL", bad, err)
		}
	}
}

func TestSynopsis(t *testing.T) {
	got := Synopsis(testOpts)
	want := []string{"[-p|--port PORT]", "[-e|--events]", "[-c]", "[--use-srq]", "[-a addr]", "[--ib-dev IB_DEV]"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Synopsis = %q, want %q", got, want)
	}
}
