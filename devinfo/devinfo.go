// Package devinfo prints an emulated device the way rdma-core's
// ibv_devinfo does (libibverbs/examples/devinfo.c, rdma-core 44; the ODP
// caps as rdma-core 65 names them): the device attributes, each port's, and
// with verbose the full capability list and the GID table, tabs and all, so
// that its output can be compared line by line with the real tool's on a
// kernel rxe device.
package devinfo

import (
	"fmt"
	"io"
	"net/netip"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
)

// Strings of ibv_devinfo for the enums it prints.
func portStateStr(s emu.PortState) string {
	switch s {
	case emu.PortDown:
		return "PORT_DOWN"
	case emu.PortInit:
		return "PORT_INIT"
	case emu.PortArmed:
		return "PORT_ARMED"
	case emu.PortActive:
		return "PORT_ACTIVE"
	}
	return "invalid state"
}

func physStateStr(s emu.PhysState) string {
	names := [...]string{1: "SLEEP", 2: "POLLING", 3: "DISABLED", 4: "PORT_CONFIGURATION TRAINNING",
		5: "LINK_UP", 6: "LINK_ERROR_RECOVERY", 7: "PHY TEST"}
	if int(s) < len(names) && names[s] != "" {
		return names[s]
	}
	return "invalid physical state"
}

func atomicCapStr(c int) string {
	switch c {
	case 0:
		return "ATOMIC_NONE"
	case 1:
		return "ATOMIC_HCA"
	case 2:
		return "ATOMIC_GLOB"
	}
	return "invalid atomic capability"
}

func mtuStr(m ib.MTU) string {
	if m.IsValid() {
		return fmt.Sprint(m.Bytes())
	}
	return "invalid MTU"
}

func widthStr(w emu.Width) string {
	switch w {
	case 1:
		return "1"
	case 2:
		return "4"
	case 4:
		return "8"
	case 8:
		return "12"
	case 16:
		return "2"
	}
	return "invalid width"
}

func speedStr(s emu.Speed) string {
	switch s {
	case 1:
		return "2.5 Gbps"
	case 2:
		return "5.0 Gbps"
	case 4, 8:
		return "10.0 Gbps"
	case 16:
		return "14.0 Gbps"
	case 32:
		return "25.0 Gbps"
	case 64:
		return "50.0 Gbps"
	case 128:
		return "100.0 Gbps"
	}
	return "invalid speed"
}

func vlStr(n uint8) string {
	switch n {
	case 1:
		return "1"
	case 2:
		return "2"
	case 3:
		return "4"
	case 4:
		return "8"
	case 5:
		return "15"
	}
	return "invalid value"
}

func linkLayerStr(l emu.LinkLayer) string {
	switch l {
	case emu.LinkLayerUnspecified, emu.LinkLayerInfiniBand:
		return "InfiniBand"
	case emu.LinkLayerEthernet:
		return "Ethernet"
	}
	return "Unknown"
}

// deviceCapNames are the IBV_DEVICE_* bits ibv_devinfo names, in its order.
var deviceCapNames = []struct {
	bit  uint32
	name string
}{
	{1 << 0, "RESIZE_MAX_WR"}, {1 << 1, "BAD_PKEY_CNTR"}, {1 << 2, "BAD_QKEY_CNTR"}, {1 << 3, "RAW_MULTI"},
	{1 << 4, "AUTO_PATH_MIG"}, {1 << 5, "CHANGE_PHY_PORT"}, {1 << 6, "UD_AV_PORT_ENFORCE"},
	{1 << 7, "CURR_QP_STATE_MOD"}, {1 << 8, "SHUTDOWN_PORT"}, {1 << 9, "INIT_TYPE"},
	{1 << 10, "PORT_ACTIVE_EVENT"}, {1 << 11, "SYS_IMAGE_GUID"}, {1 << 12, "RC_RNR_NAK_GEN"},
	{1 << 13, "SRQ_RESIZE"}, {1 << 14, "N_NOTIFY_CQ"}, {1 << 17, "MEM_WINDOW"}, {1 << 18, "UD_IP_CSUM"},
	{1 << 20, "XRC"}, {1 << 21, "MEM_MGT_EXTENSIONS"}, {1 << 23, "MEM_WINDOW_TYPE_2A"},
	{1 << 24, "MEM_WINDOW_TYPE_2B"}, {1 << 25, "RC_IP_CSUM"}, {1 << 26, "RAW_IP_CSUM"},
	{1 << 29, "MANAGED_FLOW_STEERING"},
}

// Extended capability bits ibv_devinfo names (the upper 32 bits of
// device_cap_flags_ex).
const (
	capRawScatterFCS      = 1 << 34
	capPCIWriteEndPadding = 1 << 36
	capKnownExtendedFlags = capRawScatterFCS | capPCIWriteEndPadding
)

// odpTransNames are the IBV_ODP_SUPPORT_* transport bits ibv_devinfo
// names, in its order.
var odpTransNames = []struct {
	bit  uint32
	name string
}{
	{emu.ODPSupportSend, "SUPPORT_SEND"}, {emu.ODPSupportRecv, "SUPPORT_RECV"},
	{emu.ODPSupportWrite, "SUPPORT_WRITE"}, {emu.ODPSupportRead, "SUPPORT_READ"},
	{emu.ODPSupportAtomic, "SUPPORT_ATOMIC"}, {emu.ODPSupportSRQRecv, "SUPPORT_SRQ"},
	{emu.ODPSupportFlush, "SUPPORT_FLUSH"}, {emu.ODPSupportAtomicWrite, "SUPPORT_ATOMIC_WRITE"},
}

// printODPTransCaps prints one transport's ODP caps (print_odp_trans_caps).
func printODPTransCaps(p func(string, ...any), caps uint32) {
	if caps == 0 {
		p("%sNO SUPPORT\n", flagIndent)
		return
	}
	known := uint32(0)
	for _, n := range odpTransNames {
		known |= n.bit
		if caps&n.bit != 0 {
			p("%s%s\n", flagIndent, n.name)
		}
	}
	if u := caps &^ known; u != 0 {
		p("%sunknown transport capabilities: 0x%X\n", flagIndent, u)
	}
}

// flagIndent is the indentation of ibv_devinfo's flag names.
const flagIndent = "\t\t\t\t\t"

// guidStr prints a GUID as ibv_devinfo's guid_str: four groups of 16 bits.
func guidStr(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48&0xffff, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}

// fwVerStr formats the raw firmware version as libibverbs does
// (major.minor.sub_minor from bits 32-47, 16-31, 0-15).
func fwVerStr(v uint64) string {
	return fmt.Sprintf("%d.%d.%d", v>>32&0xffff, v>>16&0xffff, v&0xffff)
}

// gidLine prints a GID table entry as ibv_devinfo's print_formated_gid: a
// RoCE v2 GID through inet_ntop as IPv6 (::ffff:a.b.c.d for IPv4), any
// other as eight groups of four hex digits; on Ethernet the type follows.
func gidLine(e emu.GIDEntry, ll emu.LinkLayer) string {
	var s, typ string
	if e.Type == ib.GIDTypeRoCEv2 {
		a := netip.AddrFrom16(e.GID)
		if a.Is4In6() {
			s = "::ffff:" + a.Unmap().String()
		} else {
			s = a.String()
		}
		typ = "RoCE v2"
	} else {
		g := e.GID
		s = fmt.Sprintf("%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x",
			g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15])
		typ = "RoCE v1"
	}
	if ll == emu.LinkLayerEthernet {
		s += ", " + typ
	}
	return s
}

// Write prints dev as ibv_devinfo [-v] [-i port] does (print_hca_cap):
// all ports, or only onlyPort when it is not 0.
func Write(w io.Writer, dev *emu.Device, verbose bool, onlyPort uint32) error {
	a := dev.Query()
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("hca_id:\t%s\n", dev.Name())
	p("\ttransport:\t\t\t%s (%d)\n", "InfiniBand", 0) // IBV_TRANSPORT_IB: rxe is an IB CA
	p("\tfw_ver:\t\t\t\t%s\n", fwVerStr(a.FWVer))
	p("\tnode_guid:\t\t\t%s\n", guidStr(a.NodeGUID))
	p("\tsys_image_guid:\t\t\t%s\n", guidStr(a.SysImageGUID))
	p("\tvendor_id:\t\t\t0x%04x\n", a.VendorID)
	p("\tvendor_part_id:\t\t\t%d\n", a.VendorPartID)
	p("\thw_ver:\t\t\t\t0x%X\n", a.HWVer)
	p("\tphys_port_cnt:\t\t\t%d\n", a.PhysPortCnt)
	if verbose {
		flags := uint32(a.DeviceCapFlags)
		p("\tmax_mr_size:\t\t\t0x%x\n", a.MaxMRSize)
		p("\tpage_size_cap:\t\t\t0x%x\n", a.PageSizeCap)
		p("\tmax_qp:\t\t\t\t%d\n", a.MaxQP)
		p("\tmax_qp_wr:\t\t\t%d\n", a.MaxQPWR)
		p("\tdevice_cap_flags:\t\t0x%08x\n", flags)
		known := uint32(0)
		for _, c := range deviceCapNames {
			known |= c.bit
			if flags&c.bit != 0 {
				p("%s%s\n", flagIndent, c.name)
			}
		}
		if flags&^known != 0 {
			p("%sUnknown flags: 0x%X\n", flagIndent, flags&^known)
		}
		p("\tmax_sge:\t\t\t%d\n", min(a.MaxSendSGE, a.MaxRecvSGE)) // ib_uverbs_query_device
		p("\tmax_sge_rd:\t\t\t%d\n", a.MaxSGERd)
		p("\tmax_cq:\t\t\t\t%d\n", a.MaxCQ)
		p("\tmax_cqe:\t\t\t%d\n", a.MaxCQE)
		p("\tmax_mr:\t\t\t\t%d\n", a.MaxMR)
		p("\tmax_pd:\t\t\t\t%d\n", a.MaxPD)
		p("\tmax_qp_rd_atom:\t\t\t%d\n", a.MaxQPRdAtom)
		p("\tmax_ee_rd_atom:\t\t\t%d\n", a.MaxEERdAtom)
		p("\tmax_res_rd_atom:\t\t%d\n", a.MaxResRdAtom)
		p("\tmax_qp_init_rd_atom:\t\t%d\n", a.MaxQPInitRdAtom)
		p("\tmax_ee_init_rd_atom:\t\t%d\n", a.MaxEEInitRdAtom)
		p("\tatomic_cap:\t\t\t%s (%d)\n", atomicCapStr(a.AtomicCap), a.AtomicCap)
		p("\tmax_ee:\t\t\t\t%d\n", a.MaxEE)
		p("\tmax_rdd:\t\t\t%d\n", a.MaxRDD)
		p("\tmax_mw:\t\t\t\t%d\n", a.MaxMW)
		p("\tmax_raw_ipv6_qp:\t\t%d\n", a.MaxRawIPv6QP)
		p("\tmax_raw_ethy_qp:\t\t%d\n", a.MaxRawEthyQP)
		p("\tmax_mcast_grp:\t\t\t%d\n", a.MaxMcastGrp)
		p("\tmax_mcast_qp_attach:\t\t%d\n", a.MaxMcastQPAttach)
		p("\tmax_total_mcast_qp_attach:\t%d\n", a.MaxTotalMcastQPAttach)
		p("\tmax_ah:\t\t\t\t%d\n", a.MaxAH)
		p("\tmax_fmr:\t\t\t%d\n", 0) // the kernel no longer reports FMRs
		p("\tmax_srq:\t\t\t%d\n", a.MaxSRQ)
		if a.MaxSRQ != 0 {
			p("\tmax_srq_wr:\t\t\t%d\n", a.MaxSRQWR)
			p("\tmax_srq_sge:\t\t\t%d\n", a.MaxSRQSGE)
		}
		p("\tmax_pkeys:\t\t\t%d\n", a.MaxPKeys)
		p("\tlocal_ca_ack_delay:\t\t%d\n", a.LocalCAAckDelay)
		// print_odp_caps (rdma-core 65, which names FLUSH and
		// ATOMIC_WRITE); rxe has no timestamps, TSO, RSS, pacing or tag
		// matching: their "none" forms follow.
		o := a.ODPCaps
		p("\tgeneral_odp_caps:\n")
		if o.General&emu.ODPSupport != 0 {
			p("%sODP_SUPPORT\n", flagIndent)
		}
		if o.General&emu.ODPSupportImplicit != 0 {
			p("%sODP_SUPPORT_IMPLICIT\n", flagIndent)
		}
		if u := o.General &^ (emu.ODPSupport | emu.ODPSupportImplicit); u != 0 {
			p("%sunknown general caps: 0x%x\n", flagIndent, u)
		}
		for _, t := range []struct {
			name string
			caps uint32
		}{{"rc", o.RC}, {"uc", o.UC}, {"ud", o.UD}, {"xrc", o.XRC}} {
			p("\t%s_odp_caps:\n", t.name)
			printODPTransCaps(p, t.caps)
		}
		p("\tcompletion_timestamp_mask not supported\n")
		p("\tcore clock not supported\n")
		ex := a.DeviceCapFlags
		p("\tdevice_cap_flags_ex:\t\t0x%X\n", ex)
		if ex&capRawScatterFCS != 0 {
			p("%sRAW_SCATTER_FCS\n", flagIndent)
		}
		if ex&capPCIWriteEndPadding != 0 {
			p("%sPCI_WRITE_END_PADDING\n", flagIndent)
		}
		if u := ex & 0xffffffff00000000 &^ capKnownExtendedFlags; u != 0 {
			p("%sUnknown flags: 0x%X\n", flagIndent, u)
		}
		p("\ttso_caps:\n\tmax_tso:\t\t\t0\n")
		p("\trss_caps:\n")
		p("\t\tmax_rwq_indirection_tables:\t\t\t0\n")
		p("\t\tmax_rwq_indirection_table_size:\t\t\t0\n")
		p("\t\trx_hash_function:\t\t\t\t0x0\n")
		p("\t\trx_hash_fields_mask:\t\t\t\t0x0\n")
		p("\tmax_wq_type_rq:\t\t\t0\n")
		p("\tpacket_pacing_caps:\n")
		p("\t\tqp_rate_limit_min:\t0kbps\n")
		p("\t\tqp_rate_limit_max:\t0kbps\n")
		p("\ttag matching not supported\n")
	}
	for port := range dev.Ports() {
		if onlyPort != 0 && port != onlyPort {
			continue
		}
		pa, err := dev.QueryPort(port)
		if err != nil {
			return fmt.Errorf("Failed to query port %d props: %w", port, err)
		}
		p("\t\tport:\t%d\n", port)
		p("\t\t\tstate:\t\t\t%s (%d)\n", portStateStr(pa.State), pa.State)
		p("\t\t\tmax_mtu:\t\t%s (%d)\n", mtuStr(pa.MaxMTU), pa.MaxMTU)
		p("\t\t\tactive_mtu:\t\t%s (%d)\n", mtuStr(pa.ActiveMTU), pa.ActiveMTU)
		p("\t\t\tsm_lid:\t\t\t%d\n", pa.SMLID)
		p("\t\t\tport_lid:\t\t%d\n", pa.LID)
		p("\t\t\tport_lmc:\t\t0x%02x\n", pa.LMC)
		ll := dev.LinkLayer(port)
		p("\t\t\tlink_layer:\t\t%s\n", linkLayerStr(ll))
		if verbose {
			p("\t\t\tmax_msg_sz:\t\t0x%x\n", pa.MaxMsgSz)
			p("\t\t\tport_cap_flags:\t\t0x%08x\n", pa.PortCapFlags)
			p("\t\t\tport_cap_flags2:\t0x%04x\n", pa.PortCapFlags2)
			p("\t\t\tmax_vl_num:\t\t%s (%d)\n", vlStr(pa.MaxVLNum), pa.MaxVLNum)
			p("\t\t\tbad_pkey_cntr:\t\t0x%x\n", pa.BadPKeyCntr)
			p("\t\t\tqkey_viol_cntr:\t\t0x%x\n", pa.QKeyViolCntr)
			p("\t\t\tsm_sl:\t\t\t%d\n", pa.SMSL)
			p("\t\t\tpkey_tbl_len:\t\t%d\n", pa.PKeyTblLen)
			p("\t\t\tgid_tbl_len:\t\t%d\n", pa.GIDTblLen)
			p("\t\t\tsubnet_timeout:\t\t%d\n", pa.SubnetTimeout)
			p("\t\t\tinit_type_reply:\t%d\n", pa.InitTypeReply)
			p("\t\t\tactive_width:\t\t%sX (%d)\n", widthStr(pa.ActiveWidth), pa.ActiveWidth)
			p("\t\t\tactive_speed:\t\t%s (%d)\n", speedStr(pa.ActiveSpeed), pa.ActiveSpeed)
			p("\t\t\tphys_state:\t\t%s (%d)\n", physStateStr(pa.PhysState), pa.PhysState)
			for i := range pa.GIDTblLen {
				e, err := dev.QueryGID(port, i)
				if err != nil { // an empty slot reads as a null GID
					continue
				}
				p("\t\t\tGID[%3d]:\t\t%s\n", i, gidLine(e, ll))
			}
		}
		p("\n")
	}
	return nil
}
