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
	"github.com/softroce/softroce/wire"
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

	full    chan *rxBatch // received batches, for ReadPackets
	done    chan struct{}
	closeMu sync.Once
	readers sync.WaitGroup

	rmu     sync.Mutex // guards cur, chk and rxSpare
	cur     *rxBatch   // the batch ReadPackets takes frames from
	chk     checker
	rxSpare []byte // a frame too long for the caller's buffer is built here

	wmu    sync.Mutex   // guards the send scratch space
	tx     []txSlot     // one per frame of a batch
	txIov  []unix.Iovec // one per frame: a message's segments are contiguous
	txMsg  []txMsg      // one per message
	txMsgs []mmsghdr    // one per message
	// gso is whether frames go out with UDP GSO: Config.GSO, until the
	// kernel refuses a segmented send.
	gso      atomic.Bool
	txDeltas idDeltas // for the identifications of GSO segments
	txErrs   atomic.Uint64
	txCount  atomic.Uint64
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

// rxBatch is what one recvmmsg received, handed from a socket's reader to
// ReadPackets, which takes its frames out and hands it back through free.
type rxBatch struct {
	free  chan *rxBatch
	n     int // messages received
	raw   [][]byte
	msgs  []mmsghdr
	iovs  []unix.Iovec
	names [][unix.SizeofSockaddrInet6]byte
	oobs  [][128]byte
	// ReadPackets' place: message i, from byte off on; meta is message
	// i's, when parsed.
	i, off int
	parsed bool
	meta   rxMeta
}

// txSlot is the per-frame send state, reused between calls.
type txSlot struct {
	scratch []byte
	pay     []byte // the datagram, in scratch
	meta    txMeta
	s       *sock
	pktinfo bool // the source address goes in a control message
}

// txMsg is the per-message send state: one datagram, or with GSO several
// segments of one size to one destination.
type txMsg struct {
	name [unix.SizeofSockaddrInet6]byte
	oob  [128]byte
	s    *sock
	segs int
}

// maxGSOBytes bounds the payload of one GSO send: a UDP length that fits
// its 16 bits.
const maxGSOBytes = 0xffff - wire.UDPSize - wire.IPv6Size

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
	l.full = make(chan *rxBatch, 2)
	l.rxSpare = make([]byte, headroom+l.mtu)
	l.tx = make([]txSlot, l.batch)
	for i := range l.tx {
		l.tx[i].scratch = make([]byte, l.mtu+64)
	}
	l.txIov = make([]unix.Iovec, l.batch)
	l.txMsg = make([]txMsg, l.batch)
	l.txMsgs = make([]mmsghdr, l.batch)
	l.gso.Store(cfg.GSO)
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
		// Trains of datagrams a GSO sender sent together arrive as one
		// message (ReadPackets splits them): fewer trips through the
		// stack. Without it (before Linux 5.0) the kernel cuts them.
		unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 1)
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

// groBatch is how many messages one recvmmsg takes: each may be a UDP
// GRO train of up to 64 KiB.
const groBatch = 16

// readLoop receives batches from s and hands them to ReadPackets until the
// link closes, two batches in turn: one filling while ReadPackets empties
// the other. The socket has UDP_GRO on: a message may hold several
// datagrams of one size (the last may be shorter) that the kernel kept
// together, from a sender's GSO send; ReadPackets makes each a frame.
func (l *Link) readLoop(s *sock) {
	defer l.readers.Done()
	n := min(l.batch, groBatch)
	free := make(chan *rxBatch, 2)
	for range cap(free) {
		b := &rxBatch{free: free, raw: make([][]byte, n), msgs: make([]mmsghdr, n), iovs: make([]unix.Iovec, n),
			names: make([][unix.SizeofSockaddrInet6]byte, n), oobs: make([][128]byte, n)}
		for i := range b.raw {
			b.raw[i] = make([]byte, 0x10000)
		}
		free <- b
	}
	var b *rxBatch
	var errno syscall.Errno
	recv := func(fd uintptr) bool {
		r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&b.msgs[0])), uintptr(n),
			unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EAGAIN || e == unix.EINTR {
			return false
		}
		b.n, errno = int(r), e
		return true
	}
	for {
		select {
		case b = <-free:
		case <-l.done:
			return
		}
		for i := range n {
			b.iovs[i].Base = &b.raw[i][0]
			b.iovs[i].SetLen(len(b.raw[i]))
			b.msgs[i] = mmsghdr{}
			h := &b.msgs[i].hdr
			h.Name = &b.names[i][0]
			h.Namelen = uint32(len(b.names[i]))
			h.Iov = &b.iovs[i]
			h.SetIovlen(1)
			h.Control = &b.oobs[i][0]
			h.SetControllen(len(b.oobs[i]))
		}
		if err := s.rc.Read(recv); err != nil {
			return // closed
		}
		if errno != 0 {
			free <- b // e.g. ECONNREFUSED from an ICMP error: keep reading
			continue
		}
		b.i, b.off, b.parsed = 0, 0, false
		select {
		case l.full <- b:
		case <-l.done:
			return
		}
	}
}

// next returns the next datagram of the batch (a message, or a datagram
// of a GRO train) with its metadata; ok is false when the batch is done.
// Messages that cannot be frames are counted and skipped.
func (l *Link) next(b *rxBatch) (pay []byte, m *rxMeta, ok bool) {
	for b.i < b.n {
		mh := &b.msgs[b.i]
		if !b.parsed {
			b.meta = rxMeta{}
			if mh.hdr.Flags&unix.MSG_TRUNC != 0 || mh.n == 0 || !parseName(b.names[b.i][:], &b.meta) ||
				!parseOOB(b.oobs[b.i][:mh.hdr.Controllen], &b.meta, l.port) {
				l.rxDropped.Add(1)
				b.i++
				continue
			}
			b.parsed, b.off = true, 0
		}
		data := b.raw[b.i][:mh.n]
		seg := b.meta.seg
		if seg <= 0 {
			seg = len(data)
		}
		k := min(seg, len(data)-b.off)
		pay = data[b.off : b.off+k]
		b.off += k
		if b.off >= len(data) {
			b.i++
			b.parsed = false
		}
		return pay, &b.meta, true
	}
	return nil, nil, false
}

// frame writes the frame of datagram pay into buf (truncated to buf when
// longer) and returns its length, or -1 for a datagram that is no frame
// (counted in Stats.RxDropped). verified reports that the frame's ICRC
// is good: an IPv4 frame always is (checked, or resealed when
// unverifiable); an IPv6 frame is checked only with checkV6. l.rmu held.
func (l *Link) frame(buf, pay []byte, m *rxMeta, checkV6 bool) (n int, verified bool) {
	v4 := m.src.Addr().Unmap().Is4()
	off := wire.EthernetSize + wire.IPv6Size + wire.UDPSize
	if v4 {
		off = wire.EthernetSize + wire.IPv4Size + wire.UDPSize
	}
	if len(pay) < minPayload || off-wire.EthernetSize+len(pay) > l.mtu {
		l.rxDropped.Add(1)
		return -1, false
	}
	b := buf
	if off+len(pay) > len(buf) {
		b = l.rxSpare
	}
	copy(b[off:], pay)
	start := synthesize(b, off, len(pay), m)
	f := b[start : off+len(pay)]
	if v4 {
		if l.chk.check(f) {
			l.unverifiable.Add(1)
		}
		verified = true
	} else if checkV6 {
		verified = wire.VerifyICRC(f, wire.EthernetSize) == nil
	}
	l.rxCount.Add(1)
	if start != 0 || len(b) != len(buf) {
		return copy(buf, f), verified && len(b) == len(buf)
	}
	return len(f), verified
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
		case h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO && len(data) >= 4:
			m.seg = int(*(*int32)(unsafe.Pointer(&data[0])))
		}
		next := unix.CmsgSpace(l - hdr)
		if next >= len(oob) {
			break
		}
		oob = oob[next:]
	}
	return ok && m.src.Addr().Is4() == m.dst.Addr().Is4()
}

// ReadPackets implements link.Link. It builds the frames in bufs from the
// datagrams the sockets' readers received: one copy from the receive
// buffer.
func (l *Link) ReadPackets(bufs [][]byte, sizes []int) (int, error) {
	return l.read(bufs, sizes, nil)
}

// ReadNoICRC is ReadPackets for an emulated device that trusts the link's
// own ICRC check (emu/rxe takes it from any link that has it and
// WriteNoICRC): verified[i] reports that frame i's ICRC is good, so the
// device need not check it again; a frame not marked is checked by the
// device (and counted there when bad). It reads at most len(verified)
// frames.
func (l *Link) ReadNoICRC(bufs [][]byte, sizes []int, verified []bool) (int, error) {
	return l.read(bufs[:min(len(bufs), len(verified))], sizes, verified)
}

func (l *Link) read(bufs [][]byte, sizes []int, verified []bool) (int, error) {
	l.rmu.Lock()
	defer l.rmu.Unlock()
	n := 0
	for n < len(bufs) {
		if l.cur == nil {
			if n > 0 {
				select {
				case l.cur = <-l.full:
				default:
					return n, nil
				}
			} else {
				select {
				case l.cur = <-l.full:
				case <-l.done:
					return 0, fmt.Errorf("udp: read: %w", net.ErrClosed)
				}
			}
		}
		pay, m, ok := l.next(l.cur)
		if !ok {
			l.cur.free <- l.cur // never blocks: it came from there
			l.cur = nil
			continue
		}
		if k, v := l.frame(bufs[n], pay, m, verified != nil); k >= 0 {
			sizes[n] = k
			if verified != nil {
				verified[n] = v
			}
			n++
		}
	}
	return n, nil
}

// SealsICRC marks the link as one that computes the ICRC of every frame
// it sends and checks every frame it receives: an emulated device (package
// emu/rxe) then builds its frames without an ICRC for WriteNoICRC and
// skips its own check of the frames ReadNoICRC marks verified. A wrapper
// that must see every frame's ICRC (a capture) holds the link rather than
// embedding *Link, which would pass this method on.
func (l *Link) SealsICRC() {}

// WriteNoICRC is WritePackets for RoCEv2 frames built without their ICRC
// (wire.Frame.NoICRC): the link computes every frame's ICRC for the
// datagram the kernel sends anyway.
func (l *Link) WriteNoICRC(bufs [][]byte) (int, error) { return l.WritePackets(bufs) }

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
		m := 0 // frames prepared
		for i := range k {
			t := &l.tx[m]
			pay, meta, err := prepare(t.scratch, bufs[done+i], l.port, l.mtu)
			if errors.Is(err, unix.EMSGSIZE) {
				k, stop = i, err
				break
			}
			if err != nil || !l.route(t, &meta) {
				l.txErrs.Add(1)
				continue
			}
			t.pay, t.meta = pay, meta
			m++
		}
		l.send(l.group(m))
		done += k
		if stop != nil {
			return done, stop
		}
	}
	return done, nil
}

// route picks the socket of a frame: the one bound to its source address,
// else the wildcard socket of its family with the source address in a
// control message. It reports false when the link has none.
func (l *Link) route(t *txSlot, m *txMeta) bool {
	src := m.src.Unmap()
	if src.Is4() != m.dst.Unmap().Is4() {
		return false
	}
	t.s, t.pktinfo = l.byAddr[src], false
	if t.s == nil {
		t.s, t.pktinfo = l.wild6, true
		if src.Is4() {
			t.s = l.wild4
		}
	}
	return t.s != nil
}

// group makes the messages of the m prepared frames and returns how many.
// With GSO, a run of frames to one destination through one socket with
// the same control messages, all of one size but the last (which may be
// shorter), is one message; the kernel cuts it into datagrams, numbering
// the IPv4 identifications 0, 1, 2, ..., so each frame's ICRC is sealed
// for its own.
func (l *Link) group(m int) int {
	gso := l.gso.Load()
	g := 0
	for i := 0; i < m; g++ {
		t := &l.tx[i]
		seg := len(t.pay)
		j := i + 1
		if gso {
			limit := min(MaxSegments, maxGSOBytes/seg)
			for j < m && j-i < limit && len(l.tx[j].pay) <= seg && len(l.tx[j-1].pay) == seg && sameFlow(t, &l.tx[j]) {
				j++
			}
			if t.meta.dst.Unmap().Is4() {
				for k := i + 1; k < j; k++ {
					setIPID(&l.tx[k].meta, uint16(k-i), &l.txDeltas)
				}
			}
		}
		for k := i; k < j; k++ {
			l.txIov[k].Base = unsafe.SliceData(l.tx[k].pay)
			l.txIov[k].SetLen(len(l.tx[k].pay))
		}
		l.fill(&l.txMsg[g], &l.txMsgs[g], i, j)
		i = j
	}
	return g
}

// sameFlow reports whether frames a and b can be segments of one send.
func sameFlow(a, b *txSlot) bool {
	return a.s == b.s && a.pktinfo == b.pktinfo && a.meta.src == b.meta.src && a.meta.dst == b.meta.dst &&
		a.meta.dport == b.meta.dport && a.meta.tos == b.meta.tos && a.meta.ttl == b.meta.ttl
}

// fill builds the message of the frames tx[i:j]: one datagram, or the
// segments of one GSO send. Their iovecs are set.
func (l *Link) fill(mm *txMsg, mh *mmsghdr, i, j int) {
	t := &l.tx[i]
	m := &t.meta
	src, dst := m.src.Unmap(), m.dst.Unmap()
	mm.s, mm.segs = t.s, j-i
	*mh = mmsghdr{}
	h := &mh.hdr
	h.Iov = &l.txIov[i]
	h.SetIovlen(j - i)
	h.Name = &mm.name[0]
	oob := mm.oob[:0]
	if dst.Is4() {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&mm.name[0]))
		*sa = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: dst.As4()}
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		p[0], p[1] = byte(m.dport>>8), byte(m.dport)
		h.Namelen = unix.SizeofSockaddrInet4
		oob = appendCmsgInt(oob, unix.IPPROTO_IP, unix.IP_TOS, int32(m.tos))
		if m.ttl != 0 {
			oob = appendCmsgInt(oob, unix.IPPROTO_IP, unix.IP_TTL, int32(m.ttl))
		}
		if t.pktinfo {
			var pi unix.Inet4Pktinfo
			pi.Spec_dst = src.As4()
			oob = appendCmsg(oob, unix.IPPROTO_IP, unix.IP_PKTINFO, unsafe.Slice((*byte)(unsafe.Pointer(&pi)), unix.SizeofInet4Pktinfo))
		}
	} else {
		sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(&mm.name[0]))
		*sa = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: dst.As16()}
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		p[0], p[1] = byte(m.dport>>8), byte(m.dport)
		h.Namelen = unix.SizeofSockaddrInet6
		oob = appendCmsgInt(oob, unix.IPPROTO_IPV6, unix.IPV6_TCLASS, int32(m.tos))
		if m.ttl != 0 {
			oob = appendCmsgInt(oob, unix.IPPROTO_IPV6, unix.IPV6_HOPLIMIT, int32(m.ttl))
		}
		if t.pktinfo {
			var pi unix.Inet6Pktinfo
			pi.Addr = src.As16()
			oob = appendCmsg(oob, unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, unsafe.Slice((*byte)(unsafe.Pointer(&pi)), unix.SizeofInet6Pktinfo))
		}
	}
	if j-i > 1 {
		seg := uint16(len(t.pay))
		oob = appendCmsg(oob, unix.SOL_UDP, unix.UDP_SEGMENT, unsafe.Slice((*byte)(unsafe.Pointer(&seg)), 2))
	}
	h.Control = &mm.oob[0]
	h.SetControllen(len(oob))
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

// send sends the g messages made by group, each run of one socket with one
// sendmmsg (more when the kernel takes fewer); a message the kernel
// refuses is counted and skipped. A segmented message refused with EIO,
// EINVAL or EOPNOTSUPP (a path without UDP GSO) turns GSO off: its frames
// are lost, as on a failed transmit, and later ones go out one by one.
func (l *Link) send(g int) {
	for i := 0; i < g; {
		s := l.txMsg[i].s
		j := i + 1
		for j < g && l.txMsg[j].s == s {
			j++
		}
		for i < j {
			l.sendFrom, l.sendTo = i, j
			err := s.rc.Write(l.sendFn)
			sent, errno := l.sendN, l.sendErrno
			if err != nil { // closed
				for ; i < g; i++ {
					l.txErrs.Add(uint64(l.txMsg[i].segs))
				}
				return
			}
			if errno != 0 {
				// The first message failed: drop it and go on.
				if segs := l.txMsg[i].segs; segs > 1 && (errno == unix.EIO || errno == unix.EINVAL || errno == unix.EOPNOTSUPP) {
					l.gso.Store(false)
				}
				l.txErrs.Add(uint64(l.txMsg[i].segs))
				i++
				continue
			}
			for range sent {
				l.txCount.Add(uint64(l.txMsg[i].segs))
				i++
			}
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
