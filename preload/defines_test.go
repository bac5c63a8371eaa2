package preload

import (
	"strconv"
	"strings"
	"testing"
)

// TestLibraryFollowsTheProtocol: the C library's copies of the protocol's
// numbers (its #defines) are proto.go's.
func TestLibraryFollowsTheProtocol(t *testing.T) {
	checkDefines(t, map[string]uint64{
		"PROTO_VERSION":             Version,
		"OP_OPEN":                   uint64(OpOpen),
		"OP_WRITE":                  uint64(OpWrite),
		"OP_MMAP":                   uint64(OpMmap),
		"OP_FDS":                    uint64(OpFds),
		"OP_SHARE":                  uint64(OpShare),
		"OP_IOCTL":                  uint64(OpIoctl),
		"OP_READ":                   uint64(OpRead),
		"FEATURE_EVENT_FD":          FeatureEventFD,
		"IOCTL_ARG_UNREADABLE":      IoctlArgUnreadable,
		"FEATURE_SHARE_PAGES":       FeatureSharePages,
		"FEATURE_ONE_WAY_DOORBELLS": FeatureOneWayDoorbells,
		"FEATURE_WATCH_PAGE":        FeatureWatchPage,
		"WATCH_HANDLES":             WatchHandles,
		"WRITE_ONE_WAY":             WriteOneWay,
		"AUX_SYNC_DOORBELLS":        AuxSyncDoorbells,
		"MAX_ONE_WAY_RUN":           MaxOneWayRun,
		"MAX_PAYLOAD":               MaxPayload,
		"MAX_FDS":                   MaxFiles,
		"NAME_MAX_LEN":              MaxNameLen,
	})
}

// checkDefines checks the numbers of the C library's #defines against want.
func checkDefines(t *testing.T, want map[string]uint64) {
	t.Helper()
	defines := map[string]string{}
	for _, line := range strings.Split(string(source), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#define" {
			defines[f[1]] = strings.Join(f[2:], " ")
		}
	}
	for name, want := range want {
		v, ok := defines[name]
		if !ok {
			t.Errorf("softroce_preload.c defines no %s", name)
			continue
		}
		v = strings.TrimSuffix(strings.Trim(v, "()"), "u")
		if a, b, shift := strings.Cut(v, "u << "); shift {
			x, _ := strconv.ParseUint(a, 0, 64)
			y, _ := strconv.ParseUint(b, 0, 64)
			v = strconv.FormatUint(x<<y, 10)
		}
		if got, err := strconv.ParseUint(v, 0, 64); err != nil || got != want {
			t.Errorf("%s is %q in softroce_preload.c, want %d", name, defines[name], want)
		}
	}
}
