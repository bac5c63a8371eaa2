package oob

import "testing"

// TestWCStatusStr checks libibverbs' texts, as Debian 12's libibverbs.so.1
// carries them (strings(1) of the library) and the tools print them.
func TestWCStatusStr(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   string
	}{
		{0, "success"}, {1, "local length error"}, {4, "local protection error"},
		{5, "Work Request Flushed Error"}, {6, "memory management operation error"},
		{9, "remote invalid request error"}, {10, "remote access error"}, {12, "transport retry counter exceeded"},
		{13, "RNR retry counter exceeded"}, {16, "aborted error"}, {21, "general error"},
		{22, "TM error"}, {23, "TM software rendezvous"}, {24, "unknown"}, {-1, "unknown"},
	} {
		if got := WCStatusStr(tc.status); got != tc.want {
			t.Errorf("WCStatusStr(%d) = %q, want %q", tc.status, got, tc.want)
		}
	}
}
