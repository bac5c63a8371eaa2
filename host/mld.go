package host

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/softroce/softroce/clock"
)

// MLDv2 record types (RFC 3810 §5.2.12).
const (
	mldModeIsExclude     = 2 // current state: listening to every source
	mldChangeToInclude   = 3 // state change: leave
	mldChangeToExclude   = 4 // state change: join
	icmpv6MLDv2Report    = 143
	icmpv6MLDQuery       = 130
	mldRouterAlertOption = 5
)

// allMLDv2Routers is where MLDv2 reports go (RFC 3810 §5.2.14).
var allMLDv2Routers = netip.MustParseAddr("ff02::16")

// reportedLocked returns the groups the Host reports with MLD: the
// solicited-node groups of its addresses, tentative ones included (the
// kernel's addrconf_join_solict), each once. All-nodes is never reported
// (RFC 3810 §6); groups joined with JoinGroup only program the MAC filter,
// as rxe's multicast attach (dev_mc_add) does, and those joined with
// JoinIPGroup are reported too.
func (h *Host) reportedLocked() []netip.Addr {
	var gs []netip.Addr
	add := func(a netip.Addr) {
		if g := solicitedNode(a); a.Is6() && !slices.Contains(gs, g) {
			gs = append(gs, g)
		}
	}
	for _, p := range h.addrs {
		add(p.Addr())
	}
	for _, st := range h.tentative {
		add(st.p.Addr())
	}
	for g := range h.ipGroups {
		if g.Is6() && reportable(g) && !slices.Contains(gs, g) {
			gs = append(gs, g)
		}
	}
	return gs
}

// joinedLocked counts how many of the Host's addresses use group g.
func (h *Host) groupUsersLocked(g netip.Addr) int {
	n := 0
	for _, p := range h.addrs {
		if p.Addr().Is6() && solicitedNode(p.Addr()) == g {
			n++
		}
	}
	for _, st := range h.tentative {
		if solicitedNode(st.p.Addr()) == g {
			n++
		}
	}
	return n
}

// sendMLDReport sends an MLDv2 report with one record per group, of
// record type typ, from the link-local address (or :: while it is
// tentative, RFC 3810 §5.2.13) to ff02::16, hop limit 1, with a
// router alert (as mld_sendpack).
func (h *Host) sendMLDReport(typ uint8, groups ...netip.Addr) {
	if len(groups) == 0 {
		return
	}
	body := make([]byte, 4, 4+20*len(groups))
	binary.BigEndian.PutUint16(body[2:], uint16(len(groups)))
	for _, g := range groups {
		body = append(body, typ, 0, 0, 0)
		body = append(body, g.AsSlice()...)
	}
	src := netip.IPv6Unspecified()
	if ll := LinkLocal(h.mac); h.HasAddr(ll) {
		src = ll
	}
	ip := ipv6Header(src, allMLDv2Routers, 1)
	ip.HopByHop = &layers.IPv6HopByHop{}
	ip.HopByHop.NextHeader = layers.IPProtocolICMPv6
	ip.HopByHop.Options = []*layers.IPv6HopByHopOption{
		{OptionType: mldRouterAlertOption, OptionLength: 2, OptionData: []byte{0, 0}}, // MLD (RFC 2711)
		{OptionType: 1, OptionLength: 0, OptionData: []byte{}},                        // PadN to 8 bytes
	}
	icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(icmpv6MLDv2Report, 0)}
	icmp.SetNetworkLayerForChecksum(ip)
	if err := h.serialize(
		&layers.Ethernet{SrcMAC: h.mac, DstMAC: MulticastMAC(allMLDv2Routers), EthernetType: layers.EthernetTypeIPv6},
		ip, icmp, gopacket.Payload(body)); err == nil {
		h.stats.mldReports.Add(1)
	}
}

// mldJoined reports that the Host started listening to g (a state-change
// report, TO_EX{}: mld_ifc_event after igmp6_group_added).
func (h *Host) mldJoined(g netip.Addr) { h.sendMLDReport(mldChangeToExclude, g) }

// mldLeft reports that the Host stopped listening to g (TO_IN{}), unless
// another of its addresses still uses it.
func (h *Host) mldLeft(g netip.Addr) {
	h.addrMu.RLock()
	users := h.groupUsersLocked(g)
	h.addrMu.RUnlock()
	if users == 0 {
		h.sendMLDReport(mldChangeToInclude, g)
	}
}

// mldMaxDelay decodes a query's maximum response delay: MLDv1 gives
// milliseconds, MLDv2 a code whose values from 32768 on are a floating
// point number (RFC 3810 §5.1.3).
func mldMaxDelay(code uint16, v2 bool) time.Duration {
	ms := uint32(code)
	if v2 && code >= 0x8000 {
		ms = (uint32(code)&0x0fff | 0x1000) << ((code>>12)&7 + 3)
	}
	return time.Duration(ms) * time.Millisecond
}

// inputMLDQuery answers a multicast listener query (MLDv1 or MLDv2): a
// general query (group ::) with the state of every reported group, a
// group-specific one with that group's if the Host listens to it, after a
// random delay below the query's maximum response delay (RFC 3810
// §6.2, igmp6_event_query). A response already pending for the same
// scope that falls due sooner is kept.
func (h *Host) inputMLDQuery(src netip.Addr) {
	p := h.icmp6.Payload
	if len(p) < 20 || h.ip6.HopLimit != 1 || !src.IsLinkLocalUnicast() {
		h.stats.malformed.Add(1)
		return
	}
	group := netip.AddrFrom16([16]byte(p[4:20]))
	delay := mldMaxDelay(binary.BigEndian.Uint16(p[0:2]), len(p) >= 24)
	h.addrMu.Lock()
	if !group.IsUnspecified() && !slices.Contains(h.reportedLocked(), group) {
		h.addrMu.Unlock()
		h.stats.notForUs.Add(1)
		return
	}
	h.rndMu.Lock()
	d := time.Duration(0)
	if delay > 0 {
		d = time.Duration(h.rnd.Int64N(int64(delay)))
	}
	h.rndMu.Unlock()
	due := h.clk.Now().Add(d)
	if prev, ok := h.mldPending[group]; ok && !prev.due.After(due) {
		h.addrMu.Unlock()
		h.stats.mldQueries.Add(1)
		return
	} else if ok {
		prev.timer.Stop()
	}
	pend := &mldResponse{due: due}
	pend.timer = h.clk.AfterFunc(d, func() { h.mldRespond(group, pend) })
	h.mldPending[group] = pend
	h.addrMu.Unlock()
	h.stats.mldQueries.Add(1)
}

// mldResponse is a pending answer to a query.
type mldResponse struct {
	due   time.Time
	timer clock.Timer
}

// mldRespond sends the current-state report a query asked for.
func (h *Host) mldRespond(group netip.Addr, pend *mldResponse) {
	h.addrMu.Lock()
	if h.mldPending[group] != pend {
		h.addrMu.Unlock()
		return
	}
	delete(h.mldPending, group)
	gs := h.reportedLocked()
	if !group.IsUnspecified() {
		if !slices.Contains(gs, group) {
			h.addrMu.Unlock()
			return // left meanwhile
		}
		gs = []netip.Addr{group}
	}
	h.addrMu.Unlock()
	h.sendMLDReport(mldModeIsExclude, gs...)
}
