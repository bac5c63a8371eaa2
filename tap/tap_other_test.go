//go:build !linux

package tap

import (
	"errors"
	"testing"
)

func TestUnsupported(t *testing.T) {
	if _, err := Open("tap0", nil); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Open: %v, want errors.ErrUnsupported", err)
	}
	if _, err := OpenPacket("eth0", nil); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("OpenPacket: %v, want errors.ErrUnsupported", err)
	}
}
