//go:build linux

package uverbs

import (
	"debug/dwarf"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/softroce/softroce/internal/testenv"
)

// cTypes names the C type behind every type of ztypes_linux.go.
var cTypes = []struct {
	goType reflect.Type
	c      string
}{
	{reflect.TypeFor[CmdHdr](), "struct ib_uverbs_cmd_hdr"},
	{reflect.TypeFor[ExCmdHdr](), "struct ib_uverbs_ex_cmd_hdr"},
	{reflect.TypeFor[AsyncEventDesc](), "struct ib_uverbs_async_event_desc"},
	{reflect.TypeFor[CompEventDesc](), "struct ib_uverbs_comp_event_desc"},
	{reflect.TypeFor[GetContext](), "struct ib_uverbs_get_context"},
	{reflect.TypeFor[GetContextResp](), "struct ib_uverbs_get_context_resp"},
	{reflect.TypeFor[QueryDevice](), "struct ib_uverbs_query_device"},
	{reflect.TypeFor[QueryDeviceResp](), "struct ib_uverbs_query_device_resp"},
	{reflect.TypeFor[ExQueryDevice](), "struct ib_uverbs_ex_query_device"},
	{reflect.TypeFor[OdpPerTransportCaps](), "ib_uverbs_odp_per_transport_caps"},
	{reflect.TypeFor[OdpCaps](), "struct ib_uverbs_odp_caps"},
	{reflect.TypeFor[RssCaps](), "struct ib_uverbs_rss_caps"},
	{reflect.TypeFor[TmCaps](), "struct ib_uverbs_tm_caps"},
	{reflect.TypeFor[CqModerationCaps](), "struct ib_uverbs_cq_moderation_caps"},
	{reflect.TypeFor[ExQueryDeviceResp](), "struct ib_uverbs_ex_query_device_resp"},
	{reflect.TypeFor[QueryPort](), "struct ib_uverbs_query_port"},
	{reflect.TypeFor[QueryPortResp](), "struct ib_uverbs_query_port_resp"},
	{reflect.TypeFor[QueryPortRespEx](), "struct ib_uverbs_query_port_resp_ex"},
	{reflect.TypeFor[IoctlHdr](), "struct ib_uverbs_ioctl_hdr"},
	{reflect.TypeFor[IoctlAttr](), "struct ib_uverbs_attr"},
	{reflect.TypeFor[QpCap](), "struct ib_uverbs_qp_cap"},
	{reflect.TypeFor[GidEntry](), "struct ib_uverbs_gid_entry"},
	{reflect.TypeFor[AllocPd](), "struct ib_uverbs_alloc_pd"},
	{reflect.TypeFor[AllocPdResp](), "struct ib_uverbs_alloc_pd_resp"},
	{reflect.TypeFor[DeallocPd](), "struct ib_uverbs_dealloc_pd"},
	{reflect.TypeFor[RegMr](), "struct ib_uverbs_reg_mr"},
	{reflect.TypeFor[RegMrResp](), "struct ib_uverbs_reg_mr_resp"},
	{reflect.TypeFor[DeregMr](), "struct ib_uverbs_dereg_mr"},
	{reflect.TypeFor[ReregMr](), "struct ib_uverbs_rereg_mr"},
	{reflect.TypeFor[ReregMrResp](), "struct ib_uverbs_rereg_mr_resp"},
	{reflect.TypeFor[AllocMw](), "struct ib_uverbs_alloc_mw"},
	{reflect.TypeFor[AllocMwResp](), "struct ib_uverbs_alloc_mw_resp"},
	{reflect.TypeFor[DeallocMw](), "struct ib_uverbs_dealloc_mw"},
	{reflect.TypeFor[CreateCompChannel](), "struct ib_uverbs_create_comp_channel"},
	{reflect.TypeFor[CreateCompChannelResp](), "struct ib_uverbs_create_comp_channel_resp"},
	{reflect.TypeFor[CreateCq](), "struct ib_uverbs_create_cq"},
	{reflect.TypeFor[ExCreateCq](), "struct ib_uverbs_ex_create_cq"},
	{reflect.TypeFor[CreateCqResp](), "struct ib_uverbs_create_cq_resp"},
	{reflect.TypeFor[ExCreateCqResp](), "struct ib_uverbs_ex_create_cq_resp"},
	{reflect.TypeFor[ResizeCq](), "struct ib_uverbs_resize_cq"},
	{reflect.TypeFor[ResizeCqResp](), "struct ib_uverbs_resize_cq_resp"},
	{reflect.TypeFor[Wc](), "struct ib_uverbs_wc"},
	{reflect.TypeFor[ReqNotifyCq](), "struct ib_uverbs_req_notify_cq"},
	{reflect.TypeFor[DestroyCq](), "struct ib_uverbs_destroy_cq"},
	{reflect.TypeFor[DestroyCqResp](), "struct ib_uverbs_destroy_cq_resp"},
	{reflect.TypeFor[GlobalRoute](), "struct ib_uverbs_global_route"},
	{reflect.TypeFor[AhAttr](), "struct ib_uverbs_ah_attr"},
	{reflect.TypeFor[CreateQp](), "struct ib_uverbs_create_qp"},
	{reflect.TypeFor[ExCreateQp](), "struct ib_uverbs_ex_create_qp"},
	{reflect.TypeFor[CreateQpResp](), "struct ib_uverbs_create_qp_resp"},
	{reflect.TypeFor[ExCreateQpResp](), "struct ib_uverbs_ex_create_qp_resp"},
	{reflect.TypeFor[QpDest](), "struct ib_uverbs_qp_dest"},
	{reflect.TypeFor[QueryQp](), "struct ib_uverbs_query_qp"},
	{reflect.TypeFor[QueryQpResp](), "struct ib_uverbs_query_qp_resp"},
	{reflect.TypeFor[ModifyQp](), "struct ib_uverbs_modify_qp"},
	{reflect.TypeFor[ExModifyQp](), "struct ib_uverbs_ex_modify_qp"},
	{reflect.TypeFor[ExModifyQpResp](), "struct ib_uverbs_ex_modify_qp_resp"},
	{reflect.TypeFor[DestroyQp](), "struct ib_uverbs_destroy_qp"},
	{reflect.TypeFor[DestroyQpResp](), "struct ib_uverbs_destroy_qp_resp"},
	{reflect.TypeFor[SendWr](), "struct ib_uverbs_send_wr"},
	{reflect.TypeFor[Sge](), "struct ib_uverbs_sge"},
	{reflect.TypeFor[PostSend](), "struct ib_uverbs_post_send"},
	{reflect.TypeFor[PostSendResp](), "struct ib_uverbs_post_send_resp"},
	{reflect.TypeFor[RecvWr](), "struct ib_uverbs_recv_wr"},
	{reflect.TypeFor[PostRecv](), "struct ib_uverbs_post_recv"},
	{reflect.TypeFor[PostRecvResp](), "struct ib_uverbs_post_recv_resp"},
	{reflect.TypeFor[PostSrqRecv](), "struct ib_uverbs_post_srq_recv"},
	{reflect.TypeFor[PostSrqRecvResp](), "struct ib_uverbs_post_srq_recv_resp"},
	{reflect.TypeFor[CreateAh](), "struct ib_uverbs_create_ah"},
	{reflect.TypeFor[CreateAhResp](), "struct ib_uverbs_create_ah_resp"},
	{reflect.TypeFor[DestroyAh](), "struct ib_uverbs_destroy_ah"},
	{reflect.TypeFor[CreateSrq](), "struct ib_uverbs_create_srq"},
	{reflect.TypeFor[CreateXsrq](), "struct ib_uverbs_create_xsrq"},
	{reflect.TypeFor[CreateSrqResp](), "struct ib_uverbs_create_srq_resp"},
	{reflect.TypeFor[ModifySrq](), "struct ib_uverbs_modify_srq"},
	{reflect.TypeFor[QuerySrq](), "struct ib_uverbs_query_srq"},
	{reflect.TypeFor[QuerySrqResp](), "struct ib_uverbs_query_srq_resp"},
	{reflect.TypeFor[DestroySrq](), "struct ib_uverbs_destroy_srq"},
	{reflect.TypeFor[DestroySrqResp](), "struct ib_uverbs_destroy_srq_resp"},
	{reflect.TypeFor[AttachMcast](), "struct ib_uverbs_attach_mcast"},
	{reflect.TypeFor[DetachMcast](), "struct ib_uverbs_detach_mcast"},
	{reflect.TypeFor[RxeGlobalRoute](), "struct rxe_global_route"},
	{reflect.TypeFor[RxeAv](), "struct rxe_av"},
	{reflect.TypeFor[RxeSendWr](), "struct rxe_send_wr"},
	{reflect.TypeFor[RxeSendWrRdma](), "rxe_send_wr_rdma"},
	{reflect.TypeFor[RxeSendWrAtomic](), "rxe_send_wr_atomic"},
	{reflect.TypeFor[RxeSendWrUd](), "rxe_send_wr_ud"},
	{reflect.TypeFor[RxeSendWrMw](), "rxe_send_wr_mw"},
	{reflect.TypeFor[RxeSge](), "struct rxe_sge"},
	{reflect.TypeFor[Mminfo](), "struct mminfo"},
	{reflect.TypeFor[RxeDmaInfo](), "struct rxe_dma_info"},
	{reflect.TypeFor[RxeSendWqe](), "struct rxe_send_wqe"},
	{reflect.TypeFor[RxeRecvWqe](), "struct rxe_recv_wqe"},
	{reflect.TypeFor[RxeCreateAhResp](), "struct rxe_create_ah_resp"},
	{reflect.TypeFor[RxeCreateCqResp](), "struct rxe_create_cq_resp"},
	{reflect.TypeFor[RxeResizeCqResp](), "struct rxe_resize_cq_resp"},
	{reflect.TypeFor[RxeCreateQpResp](), "struct rxe_create_qp_resp"},
	{reflect.TypeFor[RxeCreateSrqResp](), "struct rxe_create_srq_resp"},
	{reflect.TypeFor[RxeModifySrqCmd](), "struct rxe_modify_srq_cmd"},
	{reflect.TypeFor[RxeQueueBuf](), "struct rxe_queue_buf"},
	{reflect.TypeFor[In6Addr](), "struct in6_addr"},
	{reflect.TypeFor[SockaddrIn6](), "struct sockaddr_in6"},
	{reflect.TypeFor[KernelSockaddrStorage](), "struct __kernel_sockaddr_storage"},
	{reflect.TypeFor[UserPathRec](), "struct ib_user_path_rec"},
	{reflect.TypeFor[UcmCmdHdr](), "struct rdma_ucm_cmd_hdr"},
	{reflect.TypeFor[UcmCreateID](), "struct rdma_ucm_create_id"},
	{reflect.TypeFor[UcmCreateIDResp](), "struct rdma_ucm_create_id_resp"},
	{reflect.TypeFor[UcmDestroyID](), "struct rdma_ucm_destroy_id"},
	{reflect.TypeFor[UcmDestroyIDResp](), "struct rdma_ucm_destroy_id_resp"},
	{reflect.TypeFor[UcmBindIP](), "struct rdma_ucm_bind_ip"},
	{reflect.TypeFor[UcmBind](), "struct rdma_ucm_bind"},
	{reflect.TypeFor[UcmResolveIP](), "struct rdma_ucm_resolve_ip"},
	{reflect.TypeFor[UcmResolveAddr](), "struct rdma_ucm_resolve_addr"},
	{reflect.TypeFor[UcmResolveRoute](), "struct rdma_ucm_resolve_route"},
	{reflect.TypeFor[UcmQuery](), "struct rdma_ucm_query"},
	{reflect.TypeFor[UcmQueryRouteResp](), "struct rdma_ucm_query_route_resp"},
	{reflect.TypeFor[UcmQueryAddrResp](), "struct rdma_ucm_query_addr_resp"},
	{reflect.TypeFor[UcmQueryPathResp](), "struct rdma_ucm_query_path_resp"},
	{reflect.TypeFor[UcmConnParam](), "struct rdma_ucm_conn_param"},
	{reflect.TypeFor[UcmUDParam](), "struct rdma_ucm_ud_param"},
	{reflect.TypeFor[UcmECE](), "struct rdma_ucm_ece"},
	{reflect.TypeFor[UcmConnect](), "struct rdma_ucm_connect"},
	{reflect.TypeFor[UcmListen](), "struct rdma_ucm_listen"},
	{reflect.TypeFor[UcmAccept](), "struct rdma_ucm_accept"},
	{reflect.TypeFor[UcmReject](), "struct rdma_ucm_reject"},
	{reflect.TypeFor[UcmDisconnect](), "struct rdma_ucm_disconnect"},
	{reflect.TypeFor[UcmInitQPAttr](), "struct rdma_ucm_init_qp_attr"},
	{reflect.TypeFor[UcmNotify](), "struct rdma_ucm_notify"},
	{reflect.TypeFor[UcmJoinIPMcast](), "struct rdma_ucm_join_ip_mcast"},
	{reflect.TypeFor[UcmJoinMcast](), "struct rdma_ucm_join_mcast"},
	{reflect.TypeFor[UcmGetEvent](), "struct rdma_ucm_get_event"},
	{reflect.TypeFor[UcmEventResp](), "struct rdma_ucm_event_resp"},
	{reflect.TypeFor[UcmSetOption](), "struct rdma_ucm_set_option"},
	{reflect.TypeFor[UcmMigrateID](), "struct rdma_ucm_migrate_id"},
	{reflect.TypeFor[UcmMigrateResp](), "struct rdma_ucm_migrate_resp"},
	{reflect.TypeFor[QPAttr](), "struct ib_uverbs_qp_attr"},
	{reflect.TypeFor[PathRecData](), "struct ib_path_rec_data"},
}

// TestLayoutsMatchCCompiler compiles a C file holding one variable of every
// uapi type with debug information and compares the size of each type and
// the offset, size and name of each member, as the C compiler lays them out
// (read back from DWARF), with the Go types cgo -godefs generated.
func TestLayoutsMatchCCompiler(t *testing.T) {
	cc, err := exec.LookPath("cc")
	testenv.Require(t, err == nil, "no C compiler (cc) to check the uapi layouts against")

	dir := t.TempDir()
	var src strings.Builder
	src.WriteString(cPreamble(t))
	for i, ct := range cTypes {
		fmt.Fprintf(&src, "%s v%d;\n", ct.c, i)
	}
	if err := os.WriteFile(filepath.Join(dir, "l.c"), []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(cc, "-g", "-c", "-o", filepath.Join(dir, "l.o"), filepath.Join(dir, "l.c")).CombinedOutput()
	if err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	f, err := elf.Open(filepath.Join(dir, "l.o"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, err := f.DWARF()
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]dwarf.Type{}
	r := d.Reader()
	for {
		e, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if e == nil {
			break
		}
		if e.Tag != dwarf.TagVariable {
			continue
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		off, ok := e.Val(dwarf.AttrType).(dwarf.Offset)
		if !ok {
			continue
		}
		typ, err := d.Type(off)
		if err != nil {
			t.Fatal(err)
		}
		vars[name] = typ
	}
	for i, ct := range cTypes {
		t.Run(ct.goType.Name(), func(t *testing.T) {
			typ, ok := vars[fmt.Sprintf("v%d", i)]
			if !ok {
				t.Fatalf("no DWARF for %s", ct.c)
			}
			for {
				td, ok := typ.(*dwarf.TypedefType)
				if !ok {
					break
				}
				typ = td.Type
			}
			st, ok := typ.(*dwarf.StructType)
			if !ok {
				t.Fatalf("%s is %T in DWARF", ct.c, typ)
			}
			if got, want := ct.goType.Size(), uintptr(st.ByteSize); got != want {
				t.Errorf("sizeof(%s) = %d, Go %s is %d", ct.c, want, ct.goType.Name(), got)
			}
			var cFields []*dwarf.StructField
			for _, m := range st.Field {
				if m.Type.Size() <= 0 { // flexible arrays hold no bytes of the struct
					continue
				}
				cFields = append(cFields, m)
			}
			var goFields []reflect.StructField
			for j := range ct.goType.NumField() {
				sf := ct.goType.Field(j)
				if sf.Name == "_" || strings.HasPrefix(sf.Name, "Pad_cgo") {
					continue
				}
				goFields = append(goFields, sf)
			}
			if len(cFields) != len(goFields) {
				t.Fatalf("%s has %d members, Go %s %d fields", ct.c, len(cFields), ct.goType.Name(), len(goFields))
			}
			for j, m := range cFields {
				g := goFields[j]
				// cgo -godefs drops a prefix common to the members' names
				// (max_rndv_hdr_size becomes Rndv_hdr_size).
				// An anonymous member (a union) is AnonN, or its first
				// member's name (struct ib_uverbs_attr's data).
				anon := m.Name == "" && (strings.HasPrefix(g.Name, "Anon") || firstMember(m.Type) == strings.ToLower(g.Name))
				if !anon && !strings.HasSuffix(m.Name, strings.ToLower(g.Name[:1])+g.Name[1:]) {
					t.Errorf("%s member %d is %q, Go field %q", ct.c, j, m.Name, g.Name)
				}
				if uintptr(m.ByteOffset) != g.Offset {
					t.Errorf("offsetof(%s, %s) = %d, Go %s.%s at %d", ct.c, m.Name, m.ByteOffset, ct.goType.Name(), g.Name, g.Offset)
				}
				if uintptr(m.Type.Size()) != g.Type.Size() {
					t.Errorf("sizeof(%s.%s) = %d, Go %s.%s is %d", ct.c, m.Name, m.Type.Size(), ct.goType.Name(), g.Name, g.Type.Size())
				}
			}
		})
	}
}

// firstMember names the first member of a union type ("" for another type).
func firstMember(t dwarf.Type) string {
	if u, ok := t.(*dwarf.StructType); ok && u.Kind == "union" && len(u.Field) > 0 {
		return u.Field[0].Name
	}
	return ""
}

// cPreamble returns the C preamble of types_linux.go: the same includes and
// typedefs cgo -godefs saw.
func cPreamble(t *testing.T) string {
	b, err := os.ReadFile("types_linux.go")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "/*\n#include")
	j := strings.Index(s, "*/\nimport \"C\"")
	if i < 0 || j < i {
		t.Fatal("types_linux.go: no cgo preamble")
	}
	return s[i+3:j] + "\n"
}
