//go:build linux

package uverbs

import (
	"encoding/binary"
	"strings"
)

// CommandName names the command a write() buffer holds as the kernel's
// uapi does ("IB_USER_VERBS_CMD_MODIFY_QP", "IB_USER_VERBS_EX_CMD_CREATE_QP"),
// or "" when buf is shorter than the command header or names no command
// the kernel knows.
func CommandName(buf []byte) string {
	if len(buf) < hdrSize {
		return ""
	}
	m, err := methodOf(binary.NativeEndian.Uint32(buf))
	if err != nil || m == notSupported {
		return ""
	}
	if name, ok := strings.CutPrefix(m.name, "EX_"); ok {
		return "IB_USER_VERBS_EX_CMD_" + name
	}
	return "IB_USER_VERBS_CMD_" + m.name
}
