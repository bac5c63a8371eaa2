package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/link"
)

// Link is the UDP link. It is safe for concurrent use.
type Link struct {
	port   uint16
	mtu    int
	batch  int
	socks  []*sock
	byAddr map[netip.Addr]*sock // bound sockets by address (not the wildcard ones)
	wild4  *sock
	wild6  *sock

	rx      chan rxFrame
	done    chan struct{}
	closeMu sync.Once
	readers sync.WaitGroup
	pool    sync.Pool // *[]byte receive buffers of bufSize

	wmu     sync.Mutex // guards the send scratch space
	tx      []txSlot
	txMsgs  []mmsghdr
	txErrs  atomic.Uint64
	txCount atomic.Uint64
	// The sendmmsg call of send, made once so that sending allocates
	// nothing: it sends txMsgs[sendFrom:sendTo] and leaves the count or
	// the errno in sendN and sendErrno. wmu held.
	sendFn           func(fd uintptr) bool
	sendFrom, sendTo int
	sendN            int
	sendErrno        syscall.Errno

	rxCount, unverifiable, rxDropped atomic.Uint64
}

var _ link.Link = (*Link)(nil)

// sock is one bound socket.
type sock struct {
	conn *net.UDPConn
	rc   syscall.RawConn
	v6   bool
	wild bool
}

// rxFrame is a received frame in its pooled buffer.
type rxFrame struct {
	buf        *[]byte
	start, end int
}

// txSlot is the per-message send state, reused between calls.
type txSlot struct {
	scratch []byte
	iov     unix.Iovec
	name    [unix.SizeofSockaddrInet6]byte
	oob     [96]byte
	s       *sock
}

// mmsghdr is struct mmsghdr: a msghdr and the byte count the kernel fills
// in (Go pads it to the C size).
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

// Open binds the link's sockets and starts reading. It fails with an error
// wrapping EADDRINUSE when the port is taken on one of the addresses (the
// message says by whom, likely), EADDRNOTAVAIL for an address the host
// does not have, and EINVAL for a bad configuration.
func Open(cfg *Config) (*Link, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	l := &Link{port: cfg.Port, mtu: cfg.MTU, batch: cfg.BatchSize, byAddr: map[netip.Addr]*sock{},
		done: make(chan struct{})}
	if l.port == 0 {
		l.port = Port
	}
	if l.mtu == 0 {
		l.mtu = DefaultMTU
	}
	if l.mtu < link.MinMTU || l.mtu > link.MaxMTU {
		return nil, fmt.Errorf("udp: MTU %d outside [%d, %d]: %w", l.mtu, link.MinMTU, link.MaxMTU, unix.EINVAL)
	}
	if l.batch <= 0 {
		l.batch = 64
	}
	bufSize := headroom + l.mtu
	l.pool.New = func() any { b := make([]byte, bufSize); return &b }
	l.rx = make(chan rxFrame, 4*l.batch)
	l.tx = make([]txSlot, l.batch)
	for i := range l.tx {
		l.tx[i].scratch = make([]byte, l.mtu+64)
	}
	l.txMsgs = make([]mmsghdr, l.batch)
	l.sendFn = func(fd uintptr) bool {
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&l.txMsgs[l.sendFrom])),
			uintptr(l.sendTo-l.sendFrom), 0, 0, 0)
		if e == unix.EAGAIN || e == unix.EINTR {
			return false
		}
		l.sendN, l.sendErrno = int(r), e
		return true
	}

	fail := func(err error) (*Link, error) {
		for _, s := range l.socks {
			s.conn.Close()
		}
		return nil, err
	}
	if len(cfg.Addrs) == 0 {
		s4, err := l.bind(netip.IPv4Unspecified())
		if err != nil {
			return fail(err)
		}
		l.wild4 = s4
		s6, err := l.bind(netip.IPv6Unspecified())
		if err != nil && !errors.Is(err, unix.EAFNOSUPPORT) && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return fail(err)
		}
		l.wild6 = s6
	} else {
		for _, a := range cfg.Addrs {
			a = a.Unmap()
			if !a.IsValid() || a.IsUnspecified() || a.IsMulticast() {
				return fail(fmt.Errorf("udp: cannot bind %v: %w", a, unix.EINVAL))
			}
			if l.byAddr[a] != nil {
				continue
			}
			s, err := l.bind(a)
			if err != nil {
				return fail(err)
			}
			l.byAddr[a] = s
		}
	}
	for _, s := range l.socks {
		l.readers.Add(1)
		go l.readLoop(s)
	}
	return l, nil
}

// bind opens one socket on a and sets its options.
func (l *Link) bind(a netip.Addr) (*sock, error) {
	network := "udp4"
	if a.Is6() {
		network = "udp6"
	}
	ap := netip.AddrPortFrom(a, l.port)
	c, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(ap))
	if err != nil {
		if errors.Is(err, unix.EADDRINUSE) {
			return nil, fmt.Errorf("udp: bind %v: %w: UDP port %d is taken on that address, likely by the kernel's rxe "+
				"(the rdma_rxe module binds it on every address: see `lsmod | grep rdma_rxe`, `rdma link`) "+
				"or by another softroce (see `ss -uanp 'sport = :%d'`)", ap, err, l.port, l.port)
		}
		return nil, fmt.Errorf("udp: bind %v: %w", ap, err)
	}
	s := &sock{conn: c, v6: a.Is6(), wild: a.IsUnspecified()}
	s.rc, err = c.SyscallConn()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("udp: %v: %w", ap, err)
	}
	var opts [][3]int
	if s.v6 {
		opts = [][3]int{
			{unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1},
			{unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1},
			{unix.IPPROTO_IPV6, unix.IPV6_RECVHOPLIMIT, 1},
			{unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO},
			// Accept datagrams with a zero UDP checksum, as rxe's
			// own tunnel socket does (rxe_setup_udp_tunnel clears
			// use_udp6_rx_checksums): the kernel's rxe sends its IPv6
			// packets without one, and the ICRC protects them.
			{unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1},
		}
	} else {
		opts = [][3]int{
			{unix.IPPROTO_IP, unix.IP_PKTINFO, 1},
			{unix.IPPROTO_IP, unix.IP_RECVTOS, 1},
			{unix.IPPROTO_IP, unix.IP_RECVTTL, 1},
			// DF on every datagram: with an unconnected socket the
			// kernel then sends identification 0 (see the package doc).
			{unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO},
		}
	}
	opts = append(opts, [3]int{unix.SOL_SOCKET, unix.SO_RCVBUF, 4 << 20}, [3]int{unix.SOL_SOCKET, unix.SO_SNDBUF, 4 << 20})
	var serr error
	err = s.rc.Control(func(fd uintptr) {
		for _, o := range opts {
			if e := unix.SetsockoptInt(int(fd), o[0], o[1], o[2]); e != nil && serr == nil {
				serr = fmt.Errorf("setsockopt(%d, %d): %w", o[0], o[1], e)
			}
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("udp: %v: %w", ap, err)
	}
	l.socks = append(l.socks, s)
	return s, nil
}

// readLoop receives batches from s and queues them as frames until the
// link closes.
func (l *Link) readLoop(s *sock) {
	defer l.readers.Done()
	n := l.batch
	bufs := make([]*[]byte, n)
	msgs := make([]mmsghdr, n)
	iovs := make([]unix.Iovec, n)
	names := make([][unix.SizeofSockaddrInet6]byte, n)
	oobs := make([][128]byte, n)
	var got int
	var errno syscall.Errno
	recv := func(fd uintptr) bool {
		r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&msgs[0])), uintptr(n),
			unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EAGAIN || e == unix.EINTR {
			return false
		}
		got, errno = int(r), e
		return true
	}
	for {
		for i := range n {
			if bufs[i] == nil {
				bufs[i] = l.pool.Get().(*[]byte)
			}
			b := *bufs[i]
			iovs[i].Base = &b[headroom]
			iovs[i].SetLen(len(b) - headroom)
			msgs[i] = mmsghdr{}
			h := &msgs[i].hdr
			h.Name = &names[i][0]
			h.Namelen = uint32(len(names[i]))
			h.Iov = &iovs[i]
			h.SetIovlen(1)
			h.Control = &oobs[i][0]
			h.SetControllen(len(oobs[i]))
		}
		if err := s.rc.Read(recv); err != nil {
			return // closed
		}
		if errno != 0 {
			continue // e.g. ECONNREFUSED from an ICMP error: keep reading
		}
		for i := range got {
			mh := &msgs[i]
			if mh.hdr.Flags&unix.MSG_TRUNC != 0 || int(mh.n) < minPayload {
				l.rxDropped.Add(1)
				continue
			}
			var m rxMeta
			if !parseName(names[i][:], &m) || !parseOOB(oobs[i][:mh.hdr.Controllen], &m, l.port) {
				l.rxDropped.Add(1)
				continue
			}
			b := *bufs[i]
			start := synthesize(b, int(mh.n), &m)
			end := headroom + int(mh.n)
			if checkRx(b[start:end]) {
				l.unverifiable.Add(1)
			}
			l.rxCount.Add(1)
			select {
			case l.rx <- rxFrame{buf: bufs[i], start: start, end: end}:
				bufs[i] = nil
			case <-l.done:
				return
			}
		}
	}
}

// parseName reads the sender's address from a sockaddr_in or sockaddr_in6.
func parseName(b []byte, m *rxMeta) bool {
	switch *(*uint16)(unsafe.Pointer(&b[0])) {
	case unix.AF_INET:
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&b[0]))
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		m.src = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(p[0])<<8|uint16(p[1]))
		return true
	case unix.AF_INET6:
		sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(&b[0]))
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		m.src = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), uint16(p[0])<<8|uint16(p[1]))
		return true
	}
	return false
}

// parseOOB reads the destination, traffic class and hop limit from the
// control messages; it reports false without a destination.
func parseOOB(oob []byte, m *rxMeta, port uint16) bool {
	hdr := unix.CmsgLen(0)
	ok := false
	m.ttl = 64
	for len(oob) >= hdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < hdr || l > len(oob) {
			break
		}
		data := oob[hdr:l]
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_PKTINFO && len(data) >= unix.SizeofInet4Pktinfo:
			pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&data[0]))
			m.dst, ok = netip.AddrPortFrom(netip.AddrFrom4(pi.Addr), port), true
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS && len(data) >= 1:
			m.tos = data[0]
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TTL && len(data) >= 4:
			m.ttl = uint8(*(*int32)(unsafe.Pointer(&data[0])))
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_PKTINFO && len(data) >= unix.SizeofInet6Pktinfo:
			pi := (*unix.Inet6Pktinfo)(unsafe.Pointer(&data[0]))
			m.dst, ok = netip.AddrPortFrom(netip.AddrFrom16(pi.Addr).Unmap(), port), true
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_TCLASS && len(data) >= 4:
			m.tos = uint8(*(*int32)(unsafe.Pointer(&data[0])))
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_HOPLIMIT && len(data) >= 4:
			m.ttl = uint8(*(*int32)(unsafe.Pointer(&data[0])))
		}
		next := unix.CmsgSpace(l - hdr)
		if next >= len(oob) {
			break
		}
		oob = oob[next:]
	}
	return ok && m.src.Addr().Is4() == m.dst.Addr().Is4()
}

// ReadPackets implements link.Link.
func (l *Link) ReadPackets(bufs [][]byte, sizes []int) (int, error) {
	var f rxFrame
	select {
	case f = <-l.rx:
	case <-l.done:
		return 0, fmt.Errorf("udp: read: %w", net.ErrClosed)
	}
	n := 0
	for {
		b := *f.buf
		sizes[n] = copy(bufs[n], b[f.start:f.end])
		l.pool.Put(f.buf)
		n++
		if n == len(bufs) {
			return n, nil
		}
		select {
		case f = <-l.rx:
		default:
			return n, nil
		}
	}
}

// WritePackets implements link.Link. Frames from an address the link has
// no socket for, and datagrams the kernel refuses (no route, ...), are
// dropped and counted in Stats.TxErrors, as a netdev drops on a failed
// transmit; a frame over the MTU stops the batch with EMSGSIZE.
func (l *Link) WritePackets(bufs [][]byte) (int, error) {
	select {
	case <-l.done:
		return 0, fmt.Errorf("udp: write: %w", net.ErrClosed)
	default:
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	done := 0
	for done < len(bufs) {
		k := min(len(bufs)-done, len(l.tx))
		var stop error
		m := 0 // messages prepared
		for i := range k {
			t := &l.tx[m]
			pay, meta, err := prepare(t.scratch, bufs[done+i], l.port, l.mtu)
			if errors.Is(err, unix.EMSGSIZE) {
				k, stop = i, err
				break
			}
			if err != nil {
				l.txErrs.Add(1)
				continue
			}
			if !l.fill(t, &l.txMsgs[m], pay, &meta) {
				l.txErrs.Add(1)
				continue
			}
			m++
		}
		l.send(m)
		done += k
		if stop != nil {
			return done, stop
		}
	}
	return done, nil
}

// fill builds the message of one datagram: its socket, destination and
// control messages.
func (l *Link) fill(t *txSlot, mh *mmsghdr, pay []byte, m *txMeta) bool {
	src, dst := m.src.Unmap(), m.dst.Unmap()
	if src.Is4() != dst.Is4() {
		return false
	}
	t.s = l.byAddr[src]
	pktinfo := false
	if t.s == nil {
		if src.Is4() {
			t.s = l.wild4
		} else {
			t.s = l.wild6
		}
		pktinfo = true
	}
	if t.s == nil {
		return false
	}
	*mh = mmsghdr{}
	t.iov.Base = unsafe.SliceData(pay)
	t.iov.SetLen(len(pay))
	h := &mh.hdr
	h.Iov = &t.iov
	h.SetIovlen(1)
	h.Name = &t.name[0]
	oob := t.oob[:0]
	if dst.Is4() {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&t.name[0]))
		*sa = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: dst.As4()}
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		p[0], p[1] = byte(m.dport>>8), byte(m.dport)
		h.Namelen = unix.SizeofSockaddrInet4
		oob = appendCmsgInt(oob, unix.IPPROTO_IP, unix.IP_TOS, int32(m.tos))
		if m.ttl != 0 {
			oob = appendCmsgInt(oob, unix.IPPROTO_IP, unix.IP_TTL, int32(m.ttl))
		}
		if pktinfo {
			var pi unix.Inet4Pktinfo
			pi.Spec_dst = src.As4()
			oob = appendCmsg(oob, unix.IPPROTO_IP, unix.IP_PKTINFO, unsafe.Slice((*byte)(unsafe.Pointer(&pi)), unix.SizeofInet4Pktinfo))
		}
	} else {
		sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(&t.name[0]))
		*sa = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: dst.As16()}
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		p[0], p[1] = byte(m.dport>>8), byte(m.dport)
		h.Namelen = unix.SizeofSockaddrInet6
		oob = appendCmsgInt(oob, unix.IPPROTO_IPV6, unix.IPV6_TCLASS, int32(m.tos))
		if m.ttl != 0 {
			oob = appendCmsgInt(oob, unix.IPPROTO_IPV6, unix.IPV6_HOPLIMIT, int32(m.ttl))
		}
		if pktinfo {
			var pi unix.Inet6Pktinfo
			pi.Addr = src.As16()
			oob = appendCmsg(oob, unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, unsafe.Slice((*byte)(unsafe.Pointer(&pi)), unix.SizeofInet6Pktinfo))
		}
	}
	h.Control = &t.oob[0]
	h.SetControllen(len(oob))
	return true
}

func appendCmsgInt(oob []byte, level, typ int, v int32) []byte {
	return appendCmsg(oob, level, typ, unsafe.Slice((*byte)(unsafe.Pointer(&v)), 4))
}

func appendCmsg(oob []byte, level, typ int, data []byte) []byte {
	off := len(oob)
	oob = oob[:off+unix.CmsgSpace(len(data))]
	clear(oob[off:])
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[off]))
	h.Level, h.Type = int32(level), int32(typ)
	h.SetLen(unix.CmsgLen(len(data)))
	copy(oob[off+unix.CmsgLen(0):], data)
	return oob
}

// send sends the m prepared messages, each run of one socket with one
// sendmmsg (more when the kernel takes fewer); a message the kernel
// refuses is counted and skipped.
func (l *Link) send(m int) {
	for i := 0; i < m; {
		s := l.tx[i].s
		j := i + 1
		for j < m && l.tx[j].s == s {
			j++
		}
		for i < j {
			l.sendFrom, l.sendTo = i, j
			err := s.rc.Write(l.sendFn)
			sent, errno := l.sendN, l.sendErrno
			if err != nil { // closed
				l.txErrs.Add(uint64(m - i))
				return
			}
			if errno != 0 {
				// The first message failed: drop it and go on.
				l.txErrs.Add(1)
				i++
				continue
			}
			l.txCount.Add(uint64(sent))
			i += sent
		}
	}
}

// BatchSize implements link.Link.
func (l *Link) BatchSize() int { return l.batch }

// MTU implements link.Link.
func (l *Link) MTU() int { return l.mtu }

// Addrs returns the addresses the link is bound to; nil when it binds the
// wildcard addresses (all of the host's).
func (l *Link) Addrs() []netip.Addr {
	var as []netip.Addr
	for _, s := range l.socks {
		if !s.wild {
			ap := s.conn.LocalAddr().(*net.UDPAddr).AddrPort()
			as = append(as, ap.Addr().Unmap())
		}
	}
	return as
}

// Stats returns the link's counters.
func (l *Link) Stats() Stats {
	return Stats{RxFrames: l.rxCount.Load(), TxFrames: l.txCount.Load(), Unverifiable: l.unverifiable.Load(),
		RxDropped: l.rxDropped.Load(), TxErrors: l.txErrs.Load()}
}

// Close closes the sockets; blocked reads return.
func (l *Link) Close() error {
	err := fmt.Errorf("udp: close: %w", net.ErrClosed)
	l.closeMu.Do(func() {
		err = nil
		close(l.done)
		for _, s := range l.socks {
			if cerr := s.conn.Close(); err == nil {
				err = cerr
			}
		}
		l.readers.Wait()
	})
	return err
}
