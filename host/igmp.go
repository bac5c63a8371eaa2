package host

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"syscall"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// IP multicast membership: what the kernel's ip_mc_inc_group and
// ipv6_dev_mc_inc do for a socket or rdma_cm joining a group, as opposed
// to JoinGroup, which only opens the MAC filter (dev_mc_add, all that
// rxe's attach_mcast does).

// IGMP message types (RFC 2236 §2.1, RFC 3376 §4).
const (
	igmpQuery     = 0x11
	igmpV2Report  = 0x16
	igmpV2Leave   = 0x17
	igmpV3Report  = 0x22
	igmpHeaderLen = 8
)

// IGMPv3 group record types (RFC 3376 §4.2.12), the values MLDv2 shares.
const (
	igmpModeIsExclude   = mldModeIsExclude
	igmpChangeToInclude = mldChangeToInclude
	igmpChangeToExclude = mldChangeToExclude
)

var (
	allHosts     = netip.MustParseAddr("224.0.0.1")  // every IPv4 host listens (ip_mc_up)
	allRouters   = netip.MustParseAddr("224.0.0.2")  // IGMPv2 leaves go here
	allIGMPv3Rtr = netip.MustParseAddr("224.0.0.22") // IGMPv3 reports go here
)

// JoinIPGroup makes the Host a member of the IPv4 or IPv6 multicast group
// g on its link, as ip_mc_inc_group and ipv6_dev_mc_inc do for the
// kernel's rdma_cm (cma_igmp_send) or a socket's IP_ADD_MEMBERSHIP: the
// MAC filter opens (JoinGroup) and the first join announces the
// membership, for IPv4 with an IGMP report (Config.IGMPVersion: a v3
// state-change report TO_EX{} to 224.0.0.22, or a v2 membership report to
// the group), for IPv6 with an MLDv2 state-change report TO_EX{} to
// ff02::16. Later queries for the group are answered. Memberships count:
// each join needs a LeaveIPGroup. 224.0.0.1 and ff02::1 are never
// reported (RFC 3376 §5, RFC 3810 §6). It fails with EINVAL for an
// address that is not multicast.
func (h *Host) JoinIPGroup(g netip.Addr) error {
	g = g.Unmap()
	if !g.IsMulticast() {
		return fmt.Errorf("host: join %v: not a multicast address: %w", g, syscall.EINVAL)
	}
	if err := h.JoinGroup(g); err != nil {
		return err
	}
	h.addrMu.Lock()
	h.ipGroups[g]++
	first := h.ipGroups[g] == 1
	h.addrMu.Unlock()
	if first && reportable(g) {
		h.sendMembership(g, true)
	}
	return nil
}

// LeaveIPGroup undoes one JoinIPGroup; the last one announces the leave
// (IGMPv3 TO_IN{} or an IGMPv2 leave to 224.0.0.2; MLDv2 TO_IN{}) and
// closes the MAC filter. It fails with EADDRNOTAVAIL for a group not
// joined with JoinIPGroup.
func (h *Host) LeaveIPGroup(g netip.Addr) error {
	g = g.Unmap()
	h.addrMu.Lock()
	n := h.ipGroups[g]
	if n == 0 {
		h.addrMu.Unlock()
		return fmt.Errorf("host: leave %v: %w", g, syscall.EADDRNOTAVAIL)
	}
	if n == 1 {
		delete(h.ipGroups, g)
	} else {
		h.ipGroups[g] = n - 1
	}
	h.addrMu.Unlock()
	if n == 1 && reportable(g) {
		h.sendMembership(g, false)
	}
	return h.LeaveGroup(g)
}

// IPGroups returns the groups joined with JoinIPGroup, sorted.
func (h *Host) IPGroups() []netip.Addr {
	h.addrMu.RLock()
	defer h.addrMu.RUnlock()
	gs := make([]netip.Addr, 0, len(h.ipGroups))
	for g := range h.ipGroups {
		gs = append(gs, g)
	}
	slices.SortFunc(gs, netip.Addr.Compare)
	return gs
}

// reportable reports whether membership of g is announced: not the
// all-hosts or all-nodes group.
func reportable(g netip.Addr) bool { return g != allHosts && g != allNodes }

// sendMembership announces joining (or leaving) g.
func (h *Host) sendMembership(g netip.Addr, join bool) {
	if g.Is6() {
		typ := uint8(mldChangeToExclude)
		if !join {
			typ = mldChangeToInclude
		}
		h.sendMLDReport(typ, g)
		return
	}
	if h.igmpVersion == 2 {
		if join {
			h.sendIGMPv2(igmpV2Report, g, g)
		} else {
			h.sendIGMPv2(igmpV2Leave, allRouters, g)
		}
		return
	}
	typ := uint8(igmpChangeToExclude)
	if !join {
		typ = igmpChangeToInclude
	}
	h.sendIGMPv3(typ, g)
}

// ipv4Groups returns the reportable IPv4 groups joined with JoinIPGroup;
// addrMu held.
func (h *Host) ipv4GroupsLocked() []netip.Addr {
	var gs []netip.Addr
	for g := range h.ipGroups {
		if g.Is4() && reportable(g) {
			gs = append(gs, g)
		}
	}
	slices.SortFunc(gs, netip.Addr.Compare)
	return gs
}

// igmpSource is the source of IGMP messages: the Host's first IPv4
// address, else 0.0.0.0 (inet_select_addr finding none).
func (h *Host) igmpSource() netip.Addr {
	for _, p := range h.Addrs() {
		if p.Addr().Is4() {
			return p.Addr()
		}
	}
	return netip.IPv4Unspecified()
}

// sendIGMP sends an IGMP message to dst as the kernel's igmp_send_report
// and igmpv3_newpack build them: TTL 1, TOS 0xc0, DF, and the router
// alert option (RFC 2113).
func (h *Host) sendIGMP(dst netip.Addr, msg []byte) {
	binary.BigEndian.PutUint16(msg[2:], 0)
	binary.BigEndian.PutUint16(msg[2:], ^checksum(msg))
	err := h.serialize(
		&layers.Ethernet{SrcMAC: h.mac, DstMAC: MulticastMAC(dst), EthernetType: layers.EthernetTypeIPv4},
		&layers.IPv4{Version: 4, TOS: 0xc0, TTL: 1, Protocol: layers.IPProtocolIGMP, Flags: layers.IPv4DontFragment,
			SrcIP: h.igmpSource().AsSlice(), DstIP: dst.AsSlice(),
			Options: []layers.IPv4Option{{OptionType: 0x94, OptionLength: 4, OptionData: []byte{0, 0}}}},
		gopacket.Payload(msg))
	if err == nil {
		h.stats.igmpReports.Add(1)
	}
}

// sendIGMPv2 sends an IGMPv2 membership report or leave for group.
func (h *Host) sendIGMPv2(typ uint8, dst, group netip.Addr) {
	msg := make([]byte, igmpHeaderLen)
	msg[0] = typ
	copy(msg[4:], group.AsSlice())
	h.sendIGMP(dst, msg)
}

// sendIGMPv3 sends an IGMPv3 report with one record of type typ, no
// sources, per group.
func (h *Host) sendIGMPv3(typ uint8, groups ...netip.Addr) {
	if len(groups) == 0 {
		return
	}
	msg := make([]byte, igmpHeaderLen, igmpHeaderLen+8*len(groups))
	msg[0] = igmpV3Report
	binary.BigEndian.PutUint16(msg[6:], uint16(len(groups)))
	for _, g := range groups {
		msg = append(msg, typ, 0, 0, 0)
		msg = append(msg, g.AsSlice()...)
	}
	h.sendIGMP(allIGMPv3Rtr, msg)
}

// checksum is the Internet checksum's ones' complement sum (RFC 1071),
// folded, not inverted.
func checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return uint16(sum)
}

// inputIGMP answers membership queries (igmp_heard_query): a general
// query (group 0.0.0.0) with the state of every joined group, a
// group-specific one with that group's if the Host is a member, after a
// random delay below the query's maximum response time (IGMPv1 queries,
// with code 0, mean 10 s). Reports and leaves of other hosts need no
// answer (the Host does no report suppression, as IGMPv3 hosts do not).
func (h *Host) inputIGMP(payload []byte) {
	if len(payload) < igmpHeaderLen || checksum(payload) != 0xffff {
		h.stats.malformed.Add(1)
		return
	}
	if payload[0] != igmpQuery {
		h.stats.unhandled.Add(1)
		return
	}
	group := netip.AddrFrom4([4]byte(payload[4:8]))
	code := payload[1]
	delay := 10 * time.Second
	if code != 0 {
		if len(payload) >= 12 && code >= 128 { // IGMPv3 floating point code (RFC 3376 §4.1.1)
			delay = time.Duration(uint32(code&0x0f|0x10)<<((code>>4&7)+3)) * 100 * time.Millisecond
		} else {
			delay = time.Duration(code) * 100 * time.Millisecond
		}
	}
	h.addrMu.Lock()
	if !group.IsUnspecified() && (h.ipGroups[group] == 0 || !reportable(group)) {
		h.addrMu.Unlock()
		h.stats.notForUs.Add(1)
		return
	}
	h.rndMu.Lock()
	d := time.Duration(h.rnd.Int64N(int64(delay)))
	h.rndMu.Unlock()
	key := netip.IPv4Unspecified()
	if !group.IsUnspecified() {
		key = group
	}
	due := h.clk.Now().Add(d)
	if prev, ok := h.igmpPending[key]; ok && !prev.due.After(due) {
		h.addrMu.Unlock()
		h.stats.igmpQueries.Add(1)
		return
	} else if ok {
		prev.timer.Stop()
	}
	pend := &mldResponse{due: due}
	pend.timer = h.clk.AfterFunc(d, func() { h.igmpRespond(key, pend) })
	h.igmpPending[key] = pend
	h.addrMu.Unlock()
	h.stats.igmpQueries.Add(1)
}

// igmpRespond sends the current-state report a query asked for.
func (h *Host) igmpRespond(key netip.Addr, pend *mldResponse) {
	h.addrMu.Lock()
	if h.igmpPending[key] != pend {
		h.addrMu.Unlock()
		return
	}
	delete(h.igmpPending, key)
	gs := h.ipv4GroupsLocked()
	if !key.IsUnspecified() {
		if !slices.Contains(gs, key) {
			h.addrMu.Unlock()
			return // left meanwhile
		}
		gs = []netip.Addr{key}
	}
	h.addrMu.Unlock()
	if h.igmpVersion == 2 {
		for _, g := range gs {
			h.sendIGMPv2(igmpV2Report, g, g)
		}
		return
	}
	h.sendIGMPv3(igmpModeIsExclude, gs...)
}
