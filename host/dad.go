package host

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"time"

	"github.com/google/gopacket/layers"

	"github.com/softroce/softroce/clock"
)

// DADDelay bounds the random delay before the first duplicate address
// detection probe (the kernel's rtr_solicit_delay, 1 s, which
// addrconf_dad_kick draws the delay below).
const DADDelay = time.Second

// ndOptNonce is the ND nonce option (RFC 3971 §5.3.2) that enhanced DAD
// (RFC 7527, the kernel's enhanced_dad=1) puts in its probes, so a host
// recognizes its own probe looped back to it.
const ndOptNonce layers.ICMPv6Opt = 14

// dadState is one tentative IPv6 address (RFC 4862 §5.4): it is not used
// or answered for until DADTransmits probes went unanswered.
type dadState struct {
	p       netip.Prefix
	started bool
	sent    int
	nonce   [6]byte
	timer   clock.Timer
	done    chan struct{}
	err     error
}

// startDAD schedules the first probe of st after a random delay in
// [0, DADDelay), as addrconf_dad_kick. The caller holds no lock.
func (h *Host) startDAD(st *dadState) {
	h.addrMu.Lock()
	defer h.addrMu.Unlock()
	if st.started || st.done == nil {
		return
	}
	st.started = true
	h.rndMu.Lock()
	delay := time.Duration(h.rnd.Int64N(int64(DADDelay)))
	for i := range st.nonce {
		st.nonce[i] = byte(h.rnd.UintN(256))
	}
	h.rndMu.Unlock()
	st.timer = h.clk.AfterFunc(delay, func() { h.dadTimer(st) })
}

// dadTimer sends the next probe or, after DADTransmits probes and
// RetransTime of silence, makes the address usable (addrconf_dad_work,
// addrconf_dad_completed).
func (h *Host) dadTimer(st *dadState) {
	h.addrMu.Lock()
	if st.done == nil || !slices.Contains(h.tentative, st) {
		h.addrMu.Unlock()
		return
	}
	if st.sent < h.dadTransmits {
		st.sent++
		st.timer = h.clk.AfterFunc(h.retrans, func() { h.dadTimer(st) })
		h.addrMu.Unlock()
		h.sendDADProbe(st)
		return
	}
	h.tentative = slices.DeleteFunc(h.tentative, func(s *dadState) bool { return s == st })
	h.addrs = append(h.addrs, st.p)
	done := st.done
	st.done = nil
	h.addrMu.Unlock()
	if h.onChange != nil {
		h.onChange(AddrChange{Prefix: st.p, Added: true})
	}
	h.announce(st.p.Addr())
	close(done) // waiters return once the change is reported (the GID exists)
}

// sendDADProbe sends a neighbour solicitation for st's address from the
// unspecified address to its solicited-node group, without a source
// link-layer address option (RFC 4862 §5.4.2), with a nonce.
func (h *Host) sendDADProbe(st *dadState) {
	a := st.p.Addr()
	group := solicitedNode(a)
	icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborSolicitation, 0)}
	hdr := ipv6Header(netip.IPv6Unspecified(), group, 255)
	icmp.SetNetworkLayerForChecksum(hdr)
	if err := h.serialize(
		&layers.Ethernet{SrcMAC: h.mac, DstMAC: MulticastMAC(group), EthernetType: layers.EthernetTypeIPv6},
		hdr, icmp,
		&layers.ICMPv6NeighborSolicitation{TargetAddress: a.AsSlice(),
			Options: layers.ICMPv6Options{{Type: ndOptNonce, Data: st.nonce[:]}}}); err == nil {
		h.stats.dadProbes.Add(1)
	}
}

// tentativeLocked returns the DAD state of a, or nil.
func (h *Host) tentativeLocked(a netip.Addr) *dadState {
	for _, st := range h.tentative {
		if st.p.Addr() == a {
			return st
		}
	}
	return nil
}

// dadConflict handles an ND message about a tentative address: an
// advertisement for it, or another host's probe for it (a probe carrying
// our own nonce is our own, looped back, and is ignored). It reports
// whether a was tentative.
func (h *Host) dadConflict(a netip.Addr, probe bool, nonce []byte, from net.HardwareAddr) bool {
	h.addrMu.Lock()
	st := h.tentativeLocked(a)
	if st == nil {
		h.addrMu.Unlock()
		return false
	}
	if probe && slices.Equal(nonce, st.nonce[:]) {
		h.addrMu.Unlock()
		return true
	}
	how := "advertised by " + from.String()
	if probe {
		how = "probed for by " + from.String()
	}
	h.failDADLocked(st, fmt.Errorf("host: IPv6 address %v: duplicate address detected (%s): %w", st.p, how, syscall.EADDRINUSE), true)
	h.dadFailed[a] = st.err
	h.stats.dadFailures.Add(1)
	done := st.done
	st.done = nil
	h.addrMu.Unlock()
	h.mldLeft(solicitedNode(a))
	if h.onDADFailure != nil {
		h.onDADFailure(st.p, st.err)
	}
	close(done) // waiters return after the report and the callback
	return true
}

// failDADLocked ends st's detection with err: the address is dropped and
// its solicited-node group left. It closes st.done unless keepOpen; then
// the caller closes it.
func (h *Host) failDADLocked(st *dadState, err error, keepOpen bool) {
	if st.timer != nil {
		st.timer.Stop()
	}
	h.tentative = slices.DeleteFunc(h.tentative, func(s *dadState) bool { return s == st })
	if j := slices.Index(h.groups, solicitedNode(st.p.Addr())); j >= 0 {
		h.groups = slices.Delete(h.groups, j, j+1)
	}
	st.err = err
	if !keepOpen {
		close(st.done)
		st.done = nil
	}
}

// Tentative returns the IPv6 addresses undergoing duplicate address
// detection, in the order they were added. They are not in Addrs: the
// Host neither sends from them nor answers for them.
func (h *Host) Tentative() []netip.Prefix {
	h.addrMu.RLock()
	defer h.addrMu.RUnlock()
	out := make([]netip.Prefix, len(h.tentative))
	for i, st := range h.tentative {
		out[i] = st.p
	}
	return out
}

// WaitDAD waits until duplicate address detection of a ends. It returns
// nil if the Host holds a, the detection's error (wrapping EADDRINUSE) if
// a turned out to be a duplicate, ctx's error, or an error wrapping
// EADDRNOTAVAIL if a is neither held nor tentative nor failed.
func (h *Host) WaitDAD(ctx context.Context, a netip.Addr) error {
	a = a.Unmap()
	h.addrMu.RLock()
	st := h.tentativeLocked(a)
	var done chan struct{}
	if st != nil {
		done = st.done
	}
	held, failed := h.hasAddrLocked(a), h.dadFailed[a]
	h.addrMu.RUnlock()
	switch {
	case st != nil:
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("host: DAD of %v: %w", a, ctx.Err())
		}
		h.addrMu.RLock()
		defer h.addrMu.RUnlock()
		return st.err
	case held:
		return nil
	case failed != nil:
		return failed
	}
	return fmt.Errorf("host: DAD of %v: %w", a, syscall.EADDRNOTAVAIL)
}

// AddAddrWait is AddAddr followed, for a tentative IPv6 address, by
// WaitDAD: it returns once the address is usable, or with the duplicate
// address error. Run (or Input) must be processing frames.
func (h *Host) AddAddrWait(ctx context.Context, p netip.Prefix) error {
	if err := h.AddAddr(p); err != nil {
		return err
	}
	return h.WaitDAD(ctx, p.Addr())
}
