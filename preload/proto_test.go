package preload_test

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/preload"
)

func TestFrameRoundTrip(t *testing.T) {
	h := preload.Header{Op: preload.OpMmap, Ret: -22, Aux: 7}
	b := preload.Frame(h, []byte("payload"))
	got, p, err := preload.ParseFrame(b)
	h.Len = 7
	if err != nil || got != h || string(p) != "payload" {
		t.Fatalf("ParseFrame = %+v %q %v, want %+v", got, p, err, h)
	}
}

func TestParseFrameRejects(t *testing.T) {
	lie := preload.Frame(preload.Header{Op: preload.OpWrite}, []byte("ab"))
	lie[4] = 3
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, unix.EINVAL},
		{"short", make([]byte, preload.HeaderSize-1), unix.EINVAL},
		{"length lie", lie, unix.EINVAL},
		{"too big", preload.Frame(preload.Header{}, make([]byte, preload.MaxPayload+1)), unix.E2BIG},
	} {
		if _, _, err := preload.ParseFrame(tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

func FuzzParseFrame(f *testing.F) {
	f.Add(preload.Frame(preload.Header{Op: preload.OpOpen, Aux: preload.Version}, []byte("uverbs0")))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, p, err := preload.ParseFrame(b)
		if err == nil && (int(h.Len) != len(p) || len(p) != len(b)-preload.HeaderSize) {
			t.Fatalf("accepted %d bytes as %+v with %d payload", len(b), h, len(p))
		}
	})
}
