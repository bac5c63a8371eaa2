package peer

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// The initramfs is a "newc" cpio archive (the SVR4 format with no CRC,
// magic 070701), the one format the kernel's initramfs unpacker accepts
// (Documentation/driver-api/early-userspace/buffer-format.rst). Each entry
// is a 110-byte ASCII header of 13 eight-digit hex fields, the NUL
// terminated name padded to a multiple of 4, then the data padded to a
// multiple of 4. A "TRAILER!!!" entry ends an archive; the kernel unpacks
// concatenated archives in order, later entries overwriting earlier ones,
// which is how a run's /cmd.sh rides on the cached base image.

const (
	cpioMagic   = "070701"
	cpioTrailer = "TRAILER!!!"
	cpioHdrSize = 110

	modeDir     = 0o040000
	modeFile    = 0o100000
	modeSymlink = 0o120000
	modeCharDev = 0o020000
	modeTypeBit = 0o170000
)

// cpioEntry is one file, directory, symlink or device node of an archive.
type cpioEntry struct {
	Name   string // path without a leading slash
	Mode   uint32 // type and permission bits (modeFile|0o755, ...)
	Data   []byte // file content, or the target of a symlink
	RMajor uint32 // device number of a character device
	RMinor uint32
}

// cpioWriter writes a newc archive. Entries are written in the order
// added; the caller adds parents before children.
type cpioWriter struct {
	w     io.Writer
	ino   uint32
	names map[string]bool
	err   error
}

func newCPIOWriter(w io.Writer) *cpioWriter {
	return &cpioWriter{w: w, ino: 1, names: make(map[string]bool)}
}

func (c *cpioWriter) add(e cpioEntry) error {
	if c.err != nil {
		return c.err
	}
	name := strings.TrimPrefix(e.Name, "/")
	if name == "" || strings.Contains(name, "\x00") {
		return fmt.Errorf("cpio: bad entry name %q", e.Name)
	}
	if c.names[name] {
		return fmt.Errorf("cpio: duplicate entry %q", name)
	}
	c.names[name] = true
	nlink := uint32(1)
	if e.Mode&modeTypeBit == modeDir {
		nlink = 2
	}
	fields := []uint32{
		c.ino, e.Mode, 0, 0, nlink, 0, // ino mode uid gid nlink mtime
		uint32(len(e.Data)), 0, 0, // filesize devmajor devminor
		e.RMajor, e.RMinor, uint32(len(name) + 1), 0, // rdevmajor rdevminor namesize check
	}
	c.ino++
	var b strings.Builder
	b.WriteString(cpioMagic)
	for _, f := range fields {
		fmt.Fprintf(&b, "%08x", f)
	}
	b.WriteString(name)
	b.WriteByte(0)
	for b.Len()%4 != 0 {
		b.WriteByte(0)
	}
	if _, err := io.WriteString(c.w, b.String()); err != nil {
		c.err = err
		return err
	}
	if _, err := c.w.Write(e.Data); err != nil {
		c.err = err
		return err
	}
	if pad := (4 - len(e.Data)%4) % 4; pad > 0 {
		if _, err := c.w.Write(make([]byte, pad)); err != nil {
			c.err = err
			return err
		}
	}
	return nil
}

// close writes the trailer entry.
func (c *cpioWriter) close() error {
	if c.err != nil {
		return c.err
	}
	delete(c.names, cpioTrailer)
	return c.add(cpioEntry{Name: cpioTrailer})
}

// readCPIO reads every entry of one or more concatenated newc archives
// (zero padding between archives is skipped, as the kernel does). Each
// archive must end with its trailer.
func readCPIO(r io.Reader) ([]cpioEntry, error) {
	br := bufio.NewReader(r)
	var out []cpioEntry
	var off int64
	open := false // entries read since the last trailer
	read := func(n int) ([]byte, error) {
		b := make([]byte, n)
		_, err := io.ReadFull(br, b)
		off += int64(n)
		return b, err
	}
	for {
		// Skip the zero padding the kernel allows between archives.
		for {
			p, err := br.Peek(1)
			if err == io.EOF {
				if open {
					return out, fmt.Errorf("cpio: no %s entry at the end: %w", cpioTrailer, io.ErrUnexpectedEOF)
				}
				return out, nil
			}
			if err != nil {
				return out, err
			}
			if p[0] != 0 {
				break
			}
			br.ReadByte()
			off++
		}
		start := off
		hdr, err := read(cpioHdrSize)
		if err != nil {
			return out, fmt.Errorf("cpio: header at %d: %w", start, unexpected(err))
		}
		if string(hdr[:6]) != cpioMagic {
			return out, fmt.Errorf("cpio: bad magic %q at %d", hdr[:6], start)
		}
		var f [13]uint32
		for i := range f {
			v, err := strconv.ParseUint(string(hdr[6+8*i:14+8*i]), 16, 32)
			if err != nil {
				return out, fmt.Errorf("cpio: header field %d at %d: %w", i, start, err)
			}
			f[i] = uint32(v)
		}
		mode, size, namesize := f[1], f[6], f[11]
		if namesize == 0 || namesize > 4096 {
			return out, fmt.Errorf("cpio: name size %d at %d", namesize, start)
		}
		nb, err := read(int(namesize))
		if err != nil {
			return out, fmt.Errorf("cpio: name at %d: %w", start, unexpected(err))
		}
		if _, err := read((4 - int(cpioHdrSize+namesize)%4) % 4); err != nil {
			return out, unexpected(err)
		}
		name := strings.TrimRight(string(nb), "\x00")
		if size > 1<<30 {
			return out, fmt.Errorf("cpio: %s: size %d too large", name, size)
		}
		data, err := read(int(size))
		if err != nil {
			return out, fmt.Errorf("cpio: %s data: %w", name, unexpected(err))
		}
		if _, err := read((4 - int(size)%4) % 4); err != nil {
			return out, unexpected(err)
		}
		if name == cpioTrailer {
			open = false
			continue
		}
		open = true
		out = append(out, cpioEntry{Name: name, Mode: mode, Data: data, RMajor: f[9], RMinor: f[10]})
	}
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// cpioTree collects entries by path and writes them with every parent
// directory first, in a stable order.
type cpioTree struct {
	entries map[string]cpioEntry
}

func newCPIOTree() *cpioTree { return &cpioTree{entries: make(map[string]cpioEntry)} }

func (t *cpioTree) mkdirAll(dir string) {
	dir = strings.Trim(dir, "/")
	if dir == "" || dir == "." {
		return
	}
	if _, ok := t.entries[dir]; ok {
		return
	}
	if i := strings.LastIndexByte(dir, '/'); i >= 0 {
		t.mkdirAll(dir[:i])
	}
	t.entries[dir] = cpioEntry{Name: dir, Mode: modeDir | 0o755}
}

func (t *cpioTree) put(e cpioEntry) {
	e.Name = strings.Trim(e.Name, "/")
	if i := strings.LastIndexByte(e.Name, '/'); i >= 0 {
		t.mkdirAll(e.Name[:i])
	}
	t.entries[e.Name] = e
}

func (t *cpioTree) file(name string, mode uint32, data []byte) {
	t.put(cpioEntry{Name: name, Mode: modeFile | mode, Data: data})
}

func (t *cpioTree) symlink(name, target string) {
	t.put(cpioEntry{Name: name, Mode: modeSymlink | 0o777, Data: []byte(target)})
}

func (t *cpioTree) writeTo(w io.Writer) error {
	names := make([]string, 0, len(t.entries))
	for n := range t.entries {
		names = append(names, n)
	}
	// Sorting by path puts a directory before everything under it.
	sort.Strings(names)
	cw := newCPIOWriter(w)
	for _, n := range names {
		if err := cw.add(t.entries[n]); err != nil {
			return err
		}
	}
	return cw.close()
}
