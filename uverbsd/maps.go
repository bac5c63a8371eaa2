package uverbsd

import (
	"bytes"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// mapping is one line of /proc/PID/maps: [start, end) and whether the
// process may read and write it ('r' and 'w' in its permissions).
type mapping struct {
	start, end  uint64
	read, write bool
}

// parseMaps parses the text of /proc/PID/maps into its mappings in
// address order. A line it cannot read ends the list there: a range past
// it then counts as unmapped, so a bad line refuses, never admits.
func parseMaps(b []byte) []mapping {
	var ms []mapping
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if len(line) == 0 {
			continue
		}
		m, ok := parseMapping(line)
		if !ok || (len(ms) > 0 && m.start < ms[len(ms)-1].end) {
			break
		}
		ms = append(ms, m)
	}
	return ms
}

// parseMapping reads "start-end perms ..." (hex addresses, perms "rwxp").
func parseMapping(line []byte) (mapping, bool) {
	f := bytes.Fields(line)
	if len(f) < 2 {
		return mapping{}, false
	}
	lo, hi, ok := bytes.Cut(f[0], []byte{'-'})
	if !ok {
		return mapping{}, false
	}
	start, err1 := strconv.ParseUint(string(lo), 16, 64)
	end, err2 := strconv.ParseUint(string(hi), 16, 64)
	perms := f[1]
	if err1 != nil || err2 != nil || end <= start || len(perms) < 2 {
		return mapping{}, false
	}
	return mapping{start: start, end: end, read: perms[0] == 'r', write: perms[1] == 'w'}, true
}

// checkMapped answers as get_user_pages does for the pages of an MR
// (ib_umem_get, check_vma_flags): every byte of [addr, addr+length) must
// lie in a mapping (adjacent mappings may share the range) that the
// process may write when write is set, else one it may read; anything
// else is EFAULT. A PROT_NONE mapping fails either way; a private
// read-write mapping is writable (the pin breaks copy-on-write).
func checkMapped(ms []mapping, addr, length uint64, write bool) error {
	end := addr + length
	if end < addr {
		return fmt.Errorf("range %#x+%#x wraps: %w", addr, length, unix.EFAULT)
	}
	a := addr
	for _, m := range ms {
		if a >= end {
			break
		}
		if m.end <= a {
			continue
		}
		if m.start > a {
			break
		}
		switch {
		case write && !m.write:
			return fmt.Errorf("%#x lies in %#x-%#x, which the process may not write: %w", a, m.start, m.end, unix.EFAULT)
		case !write && !m.read:
			return fmt.Errorf("%#x lies in %#x-%#x, which the process may not read: %w", a, m.start, m.end, unix.EFAULT)
		}
		a = m.end
	}
	if a < end {
		return fmt.Errorf("%#x is not mapped: %w", a, unix.EFAULT)
	}
	return nil
}

// checkPidMaps checks [addr, addr+length) against /proc/pid/maps.
func checkPidMaps(pid int, addr, length uint64, write bool) error {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		return fmt.Errorf("client memory of pid %d: %v: %w", pid, err, unix.EFAULT)
	}
	if err := checkMapped(parseMaps(b), addr, length, write); err != nil {
		return fmt.Errorf("client memory of pid %d: %w", pid, err)
	}
	return nil
}
