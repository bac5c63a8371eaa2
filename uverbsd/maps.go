package uverbsd

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// mapping is one line of /proc/PID/maps: [start, end), whether the
// process may read and write it ('r' and 'w' in its permissions), and the
// file behind it: its offset at start, device and inode (0 for anonymous
// memory).
type mapping struct {
	start, end  uint64
	read, write bool
	offset      uint64
	dev         uint64 // unix.Mkdev(major, minor)
	inode       uint64
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
	m := mapping{start: start, end: end, read: perms[0] == 'r', write: perms[1] == 'w'}
	if len(f) >= 5 {
		off, err1 := strconv.ParseUint(string(f[2]), 16, 64)
		maj, min, ok := bytes.Cut(f[3], []byte{':'})
		ma, err2 := strconv.ParseUint(string(maj), 16, 32)
		mi, err3 := strconv.ParseUint(string(min), 16, 32)
		ino, err4 := strconv.ParseUint(string(f[4]), 10, 64)
		if err1 != nil || !ok || err2 != nil || err3 != nil || err4 != nil {
			return mapping{}, false
		}
		m.offset, m.dev, m.inode = off, unix.Mkdev(uint32(ma), uint32(mi)), ino
	}
	return m, true
}

// readPidMaps reads and parses /proc/pid/maps.
func readPidMaps(pid int) ([]mapping, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		return nil, err
	}
	return parseMaps(b), nil
}

// walk calls fn, in address order, for each mapping that covers the next
// part of [addr, end), with the first address a of the range it covers. It
// returns where the covered part ends (end, or the first address no
// mapping covers) and fn's first error.
func walk(ms []mapping, addr, end uint64, fn func(m mapping, a uint64) error) (uint64, error) {
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
		if err := fn(m, a); err != nil {
			return a, err
		}
		a = m.end
	}
	return a, nil
}

// errOtherFile stops a walk at a mapping of another file or offset.
var errOtherFile = errors.New("another file or offset")

// mapsFile reports whether every byte of [addr, addr+length) lies in
// mappings of the file dev:inode at the file offset addr-base, as where
// the file's offset 0 is mapped at base and the range has not moved since.
func mapsFile(ms []mapping, addr, length, base, dev, inode uint64) bool {
	end := addr + length
	if end <= addr || addr < base {
		return false
	}
	a, err := walk(ms, addr, end, func(m mapping, a uint64) error {
		if m.inode != inode || m.dev != dev || m.offset+(a-m.start) != a-base {
			return errOtherFile
		}
		return nil
	})
	return err == nil && a >= end
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
	a, err := walk(ms, addr, end, func(m mapping, a uint64) error {
		switch {
		case write && !m.write:
			return fmt.Errorf("%#x lies in %#x-%#x, which the process may not write: %w", a, m.start, m.end, unix.EFAULT)
		case !write && !m.read:
			return fmt.Errorf("%#x lies in %#x-%#x, which the process may not read: %w", a, m.start, m.end, unix.EFAULT)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if a < end {
		return fmt.Errorf("%#x is not mapped: %w", a, unix.EFAULT)
	}
	return nil
}

// checkPidMaps checks [addr, addr+length) against /proc/pid/maps and
// returns the mappings it read.
func checkPidMaps(pid int, addr, length uint64, write bool) ([]mapping, error) {
	ms, err := readPidMaps(pid)
	if err != nil {
		return nil, fmt.Errorf("client memory of pid %d: %v: %w", pid, err, unix.EFAULT)
	}
	if err := checkMapped(ms, addr, length, write); err != nil {
		return nil, fmt.Errorf("client memory of pid %d: %w", pid, err)
	}
	return ms, nil
}
