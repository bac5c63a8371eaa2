package main

import (
	"bytes"
	"strings"
	"testing"
)

// runCmd runs a softroce command line and returns its status and output.
func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// devinfoLines are the lines `ibv_devinfo -v` prints for a Linux 6.12 rxe device
// (rxe_param.h defaults, rxe_query_port) on a netdev with MAC 52:54:00:12:34:56,
// MTU 1500, addresses 10.0.0.1 and fd00::1, in the layout of rdma-core 44's
// devinfo.c (print_hca_cap), tabs included.
var devinfoLines = []struct {
	name    string
	line    string
	verbose bool // printed only with -v
}{
	{"hca_id", "hca_id:\tsoftroce0", false},
	{"transport", "\ttransport:\t\t\tInfiniBand (0)", false},
	{"fw_ver", "\tfw_ver:\t\t\t\t0.0.0", false},
	{"node_guid", "\tnode_guid:\t\t\t5054:00ff:fe12:3456", false},
	{"sys_image_guid", "\tsys_image_guid:\t\t\t5054:00ff:fe12:3456", false},
	{"vendor_id", "\tvendor_id:\t\t\t0xffffff", false},
	{"vendor_part_id", "\tvendor_part_id:\t\t\t0", false},
	{"hw_ver", "\thw_ver:\t\t\t\t0x0", false},
	{"phys_port_cnt", "\tphys_port_cnt:\t\t\t1", false},
	{"max_mr_size", "\tmax_mr_size:\t\t\t0xffffffffffffffff", true},
	{"page_size_cap", "\tpage_size_cap:\t\t\t0xfffff000", true},
	{"max_qp", "\tmax_qp:\t\t\t\t1048560", true},
	{"max_qp_wr", "\tmax_qp_wr:\t\t\t1048576", true},
	{"device_cap_flags", "\tdevice_cap_flags:\t\t0x01223c76", true},
	{"BAD_PKEY_CNTR", "\t\t\t\t\tBAD_PKEY_CNTR", true},
	{"BAD_QKEY_CNTR", "\t\t\t\t\tBAD_QKEY_CNTR", true},
	{"AUTO_PATH_MIG", "\t\t\t\t\tAUTO_PATH_MIG", true},
	{"CHANGE_PHY_PORT", "\t\t\t\t\tCHANGE_PHY_PORT", true},
	{"UD_AV_PORT_ENFORCE", "\t\t\t\t\tUD_AV_PORT_ENFORCE", true},
	{"PORT_ACTIVE_EVENT", "\t\t\t\t\tPORT_ACTIVE_EVENT", true},
	{"SYS_IMAGE_GUID", "\t\t\t\t\tSYS_IMAGE_GUID", true},
	{"RC_RNR_NAK_GEN", "\t\t\t\t\tRC_RNR_NAK_GEN", true},
	{"SRQ_RESIZE", "\t\t\t\t\tSRQ_RESIZE", true},
	{"MEM_WINDOW", "\t\t\t\t\tMEM_WINDOW", true},
	{"MEM_MGT_EXTENSIONS", "\t\t\t\t\tMEM_MGT_EXTENSIONS", true},
	{"MEM_WINDOW_TYPE_2B", "\t\t\t\t\tMEM_WINDOW_TYPE_2B", true},
	{"max_sge", "\tmax_sge:\t\t\t32", true},
	{"max_sge_rd", "\tmax_sge_rd:\t\t\t32", true},
	{"max_cq", "\tmax_cq:\t\t\t\t1048576", true},
	{"max_cqe", "\tmax_cqe:\t\t\t32767", true},
	{"max_mr", "\tmax_mr:\t\t\t\t524287", true},
	{"max_pd", "\tmax_pd:\t\t\t\t1048576", true},
	{"max_qp_rd_atom", "\tmax_qp_rd_atom:\t\t\t128", true},
	{"max_ee_rd_atom", "\tmax_ee_rd_atom:\t\t\t0", true},
	{"max_res_rd_atom", "\tmax_res_rd_atom:\t\t258048", true},
	{"max_qp_init_rd_atom", "\tmax_qp_init_rd_atom:\t\t128", true},
	{"max_ee_init_rd_atom", "\tmax_ee_init_rd_atom:\t\t0", true},
	{"atomic_cap", "\tatomic_cap:\t\t\tATOMIC_HCA (1)", true},
	{"max_ee", "\tmax_ee:\t\t\t\t0", true},
	{"max_rdd", "\tmax_rdd:\t\t\t0", true},
	{"max_mw", "\tmax_mw:\t\t\t\t524287", true},
	{"max_raw_ipv6_qp", "\tmax_raw_ipv6_qp:\t\t0", true},
	{"max_raw_ethy_qp", "\tmax_raw_ethy_qp:\t\t0", true},
	{"max_mcast_grp", "\tmax_mcast_grp:\t\t\t8192", true},
	{"max_mcast_qp_attach", "\tmax_mcast_qp_attach:\t\t56", true},
	{"max_total_mcast_qp_attach", "\tmax_total_mcast_qp_attach:\t458752", true},
	{"max_ah", "\tmax_ah:\t\t\t\t32767", true},
	{"max_fmr", "\tmax_fmr:\t\t\t0", true},
	{"max_srq", "\tmax_srq:\t\t\t917503", true},
	{"max_srq_wr", "\tmax_srq_wr:\t\t\t1048576", true},
	{"max_srq_sge", "\tmax_srq_sge:\t\t\t27", true},
	{"max_pkeys", "\tmax_pkeys:\t\t\t64", true},
	{"local_ca_ack_delay", "\tlocal_ca_ack_delay:\t\t15", true},
	{"general_odp_caps", "\tgeneral_odp_caps:\n\t\t\t\t\tODP_SUPPORT", true},
	{"rc_odp_caps", "\trc_odp_caps:\n\t\t\t\t\tSUPPORT_SEND\n\t\t\t\t\tSUPPORT_RECV\n\t\t\t\t\tSUPPORT_WRITE\n" +
		"\t\t\t\t\tSUPPORT_READ\n\t\t\t\t\tSUPPORT_ATOMIC\n\t\t\t\t\tSUPPORT_SRQ\n\t\t\t\t\tSUPPORT_FLUSH\n" +
		"\t\t\t\t\tSUPPORT_ATOMIC_WRITE", true},
	{"uc_odp_caps", "\tuc_odp_caps:\n\t\t\t\t\tNO SUPPORT", true},
	{"ud_odp_caps", "\tud_odp_caps:\n\t\t\t\t\tSUPPORT_SEND\n\t\t\t\t\tSUPPORT_RECV\n\t\t\t\t\tSUPPORT_SRQ", true},
	{"xrc_odp_caps", "\txrc_odp_caps:\n\t\t\t\t\tNO SUPPORT", true},
	{"completion_timestamp_mask", "\tcompletion_timestamp_mask not supported", true},
	{"core clock", "\tcore clock not supported", true},
	{"device_cap_flags_ex", "\tdevice_cap_flags_ex:\t\t0x1C001223C76", true},
	{"unknown extended flags", "\t\t\t\t\tUnknown flags: 0x1C000000000", true},
	{"tso_caps", "\ttso_caps:\n\tmax_tso:\t\t\t0", true},
	{"max_wq_type_rq", "\tmax_wq_type_rq:\t\t\t0", true},
	{"tag matching", "\ttag matching not supported", true},
	{"port", "\t\tport:\t1", false},
	{"state", "\t\t\tstate:\t\t\tPORT_ACTIVE (4)", false},
	{"max_mtu", "\t\t\tmax_mtu:\t\t4096 (5)", false},
	{"active_mtu", "\t\t\tactive_mtu:\t\t1024 (3)", false},
	{"sm_lid", "\t\t\tsm_lid:\t\t\t0", false},
	{"port_lid", "\t\t\tport_lid:\t\t0", false},
	{"port_lmc", "\t\t\tport_lmc:\t\t0x00", false},
	{"link_layer", "\t\t\tlink_layer:\t\tEthernet", false},
	{"max_msg_sz", "\t\t\tmax_msg_sz:\t\t0x80000000", true},
	{"port_cap_flags", "\t\t\tport_cap_flags:\t\t0x00010000", true},
	{"port_cap_flags2", "\t\t\tport_cap_flags2:\t0x0000", true},
	{"max_vl_num", "\t\t\tmax_vl_num:\t\t1 (1)", true},
	{"bad_pkey_cntr", "\t\t\tbad_pkey_cntr:\t\t0x0", true},
	{"qkey_viol_cntr", "\t\t\tqkey_viol_cntr:\t\t0x0", true},
	{"sm_sl", "\t\t\tsm_sl:\t\t\t0", true},
	{"pkey_tbl_len", "\t\t\tpkey_tbl_len:\t\t1", true},
	{"gid_tbl_len", "\t\t\tgid_tbl_len:\t\t1024", true},
	{"subnet_timeout", "\t\t\tsubnet_timeout:\t\t0", true},
	{"init_type_reply", "\t\t\tinit_type_reply:\t0", true},
	{"active_width", "\t\t\tactive_width:\t\t1X (1)", true},
	{"active_speed", "\t\t\tactive_speed:\t\t2.5 Gbps (1)", true},
	{"phys_state", "\t\t\tphys_state:\t\tLINK_UP (5)", true},
	{"GID 0 link-local", "\t\t\tGID[  0]:\t\tfe80::5054:ff:fe12:3456, RoCE v2", true},
	{"GID 1 IPv4", "\t\t\tGID[  1]:\t\t::ffff:10.0.0.1, RoCE v2", true},
	{"GID 2 IPv6", "\t\t\tGID[  2]:\t\tfd00::1, RoCE v2", true},
}

func TestDevinfo(t *testing.T) {
	args := []string{"--mac", "52:54:00:12:34:56", "--ip", "10.0.0.1/24", "--ip", "fd00::1/64"}
	for _, verbose := range []bool{false, true} {
		a := append([]string{"devinfo"}, args...)
		if verbose {
			a = append(a, "-v")
		}
		code, out, errs := runCmd(t, a...)
		if code != 0 {
			t.Fatalf("devinfo %v: status %d, stderr %q", a, code, errs)
		}
		rest := out // lines must appear in this order
		for _, l := range devinfoLines {
			t.Run(map[bool]string{false: "plain/", true: "verbose/"}[verbose]+l.name, func(t *testing.T) {
				i := strings.Index(rest, l.line+"\n")
				// A line must start where a line starts.
				for i > 0 && rest[i-1] != '\n' {
					j := strings.Index(rest[i+1:], l.line+"\n")
					if j < 0 {
						i = -1
						break
					}
					i += 1 + j
				}
				switch {
				case l.verbose && !verbose:
					if strings.Contains(out, l.line+"\n") {
						t.Fatalf("%q printed without -v", l.line)
					}
				case i < 0:
					t.Fatalf("%q missing (or out of order) in\n%s", l.line, out)
				default:
					rest = rest[i+len(l.line):]
				}
			})
		}
		if !verbose && strings.Contains(out, "GID[") {
			t.Errorf("GID table printed without -v")
		}
		if !strings.HasSuffix(out, "link_layer:\t\tEthernet\n\nsoftroce: the rxe of Linux 7.3\n") && !verbose {
			t.Errorf("plain output does not end with the port block, a blank line and the kernel:\n%s", out)
		}
	}
}

// TestDevinfoKernel: --kernel selects the rxe devinfo shows, and says
// so: 6.1's port max_msg_sz is 0x800000 (2^31 from db03b70969aa, in
// 6.12.y and 7.3).
func TestDevinfoKernel(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		out  []string
		err  string
	}{
		{[]string{"devinfo", "-v"}, 0, []string{"max_msg_sz:\t\t0x80000000\n", "softroce: the rxe of Linux 7.3\n"}, ""},
		{[]string{"devinfo", "-v", "--kernel", "7.3"}, 0, []string{"max_msg_sz:\t\t0x80000000\n", "softroce: the rxe of Linux 7.3\n"}, ""},
		{[]string{"devinfo", "-v", "--kernel", "6.12"}, 0, []string{"max_msg_sz:\t\t0x80000000\n", "softroce: the rxe of Linux 6.12\n"}, ""},
		{[]string{"devinfo", "-v", "--kernel=6.1"}, 0, []string{"max_msg_sz:\t\t0x800000\n", "softroce: the rxe of Linux 6.1\n"}, ""},
		{[]string{"devinfo", "--kernel", "6.13"}, 2, nil, "not one of 7.3, 6.12, 6.1"},
	} {
		code, out, errs := runCmd(t, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.err) {
			t.Errorf("%v: status %d (want %d), stderr %q (want %q)", tc.args, code, tc.code, errs, tc.err)
		}
		for _, o := range tc.out {
			if !strings.Contains(out, o) {
				t.Errorf("%v: %q missing from\n%s", tc.args, o, out)
			}
		}
	}
}

func TestDevinfoFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		out  string // substring of stdout
		err  string // substring of stderr
	}{
		{"list", []string{"devinfo", "-l", "-d", "rxe7"}, 0, "1 HCA found:\n\trxe7\n\n", ""},
		{"device name", []string{"devinfo", "-d", "mydev"}, 0, "hca_id:\tmydev\n", ""},
		{"port 1", []string{"devinfo", "-i", "1"}, 0, "\t\tport:\t1\n", ""},
		{"port 2", []string{"devinfo", "-i", "2"}, 4, "", "Invalid port requested for device"},
		{"mtu 4176 gives 4096", []string{"devinfo", "--mtu", "4176"}, 0, "active_mtu:\t\t4096 (5)", ""},
		{"mtu 2127 gives 1024", []string{"devinfo", "--mtu", "2127"}, 0, "active_mtu:\t\t1024 (3)", ""},
		{"mtu 9000 gives 4096", []string{"devinfo", "--mtu", "9000"}, 0, "active_mtu:\t\t4096 (5)", ""},
		{"mtu 2128 gives 2048 (rxe subtracts 80 header bytes)", []string{"devinfo", "--mtu", "2128"}, 0, "active_mtu:\t\t2048 (4)", ""},
		{"bare IP is a host address", []string{"devinfo", "-v", "--ip", "192.0.2.7"}, 0, "::ffff:192.0.2.7, RoCE v2", ""},
		{"bad ip", []string{"devinfo", "--ip", "10.0.0.300/24"}, 2, "", "invalid value"},
		{"bad mac", []string{"devinfo", "--mac", "zz"}, 2, "", "--mac"},
		{"multicast mac", []string{"devinfo", "--mac", "01:00:5e:00:00:01"}, 1, "", "unicast"},
		{"tap and iface", []string{"devinfo", "--tap", "t0", "--iface", "eth0"}, 2, "", "exclusive"},
		{"bridge alone", []string{"devinfo", "--bridge", "br0"}, 2, "", "--bridge needs"},
		{"extra argument", []string{"devinfo", "rxe0"}, 2, "", "usage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runCmd(t, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.out) || !strings.Contains(errs, tc.err) {
				t.Fatalf("%v: status %d (want %d)\nstdout %q (want %q)\nstderr %q (want %q)",
					tc.args, code, tc.code, out, tc.out, errs, tc.err)
			}
		})
	}
}

func TestDevinfoMACDerivation(t *testing.T) {
	guid := func(args ...string) string {
		_, out, _ := runCmd(t, append([]string{"devinfo"}, args...)...)
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "\tnode_guid:") {
				return l
			}
		}
		t.Fatalf("no node_guid in %q", out)
		return ""
	}
	a1, a2 := guid("--ip", "10.0.0.1/24"), guid("--ip", "10.0.0.1/24")
	b := guid("--ip", "10.0.0.2/24")
	if a1 != a2 {
		t.Errorf("same flags gave %q then %q", a1, a2)
	}
	if a1 == b {
		t.Errorf("different addresses gave the same GUID %q", a1)
	}
}
