package emu_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// kernelNames is the kernel API softroce mirrors one to one:
// ib_modify_qp(9) and the names of its SEE ALSO list, in that order.
var kernelNames = strings.Split("ib_modify_qp, struct rdma_stat_desc, struct rdma_hw_stats, ib_rate_to_mult, "+
	"ib_rate_to_mbps, ib_port_attr_to_speed_info, enum ib_mr_type, struct ib_mr_status, mult_to_ib_rate, "+
	"struct ib_udata, struct rdma_netdev, struct ib_device_ops, ib_get_client_data, ib_modify_qp_is_ok, "+
	"rdma_cap_ib_switch, rdma_start_port, rdma_for_each_port, rdma_end_port, rdma_cap_ib_mad, rdma_cap_opa_mad, "+
	"rdma_cap_ib_smi, rdma_cap_ib_cm, rdma_cap_iw_cm, rdma_cap_ib_sa, rdma_cap_ib_mcast, rdma_cap_af_ib, "+
	"rdma_cap_eth_ah, rdma_cap_opa_ah, rdma_max_mad_size, rdma_cap_roce_gid_table, rdma_core_cap_opa_port, "+
	"rdma_mtu_enum_to_int, rdma_mtu_from_attr, ib_alloc_pd, ib_dealloc_pd, rdma_create_ah, rdma_create_user_ah, "+
	"ib_get_gids_from_rdma_hdr, ib_get_rdma_header_version, ib_init_ah_attr_from_wc, ib_create_ah_from_wc, "+
	"rdma_modify_ah, rdma_query_ah, rdma_destroy_ah_user, rdma_destroy_ah, ib_modify_srq, ib_query_srq, "+
	"ib_destroy_srq_user, ib_destroy_srq, ib_post_srq_recv, ib_create_qp, ib_modify_qp_with_udata, ib_query_qp, "+
	"ib_destroy_qp, ib_open_qp, ib_close_qp, ib_post_send, ib_post_recv, ib_alloc_cq_any, rdma_set_cq_moderation, "+
	"ib_destroy_cq_user, ib_destroy_cq, ib_poll_cq, ib_req_notify_cq, ib_virt_dma_to_ptr, ib_virt_dma_to_page, "+
	"ib_dma_mapping_error, ib_dma_map_single, ib_dma_unmap_single, ib_dma_map_page, ib_dma_unmap_page, "+
	"ib_dma_map_bvec, ib_dma_unmap_bvec, ib_dma_map_sgtable_attrs, ib_dma_map_sg, ib_dma_unmap_sg, "+
	"ib_dma_max_seg_size, ib_dma_sync_single_for_cpu, ib_dma_sync_single_for_device, ib_dereg_mr_user, "+
	"ib_dereg_mr, ib_update_fast_reg_key, ib_inc_rkey, ib_attach_mcast, ib_detach_mcast, ib_check_mr_status, "+
	"ib_device_try_get, rdma_ah_find_type, ib_lid_cpu16, ib_lid_be16, rdma_roce_rescan_device, "+
	"rdma_device_to_ibdev, ibdev_to_node, rdma_device_to_drv_device, rdma_flow_label_to_udp_sport, "+
	"rdma_calc_flow_label, rdma_get_udp_sport", ", ")

type apiRow struct {
	kernel, ident, test, note string
	line                      int
}

func readAPIDoc(t *testing.T, path string) []apiRow {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rows []apiRow
	for i, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), " | ")
		if len(cells) < 4 {
			t.Fatalf("line %d: %d cells: %q", i+1, len(cells), l)
		}
		unq := func(s string) string { return strings.Trim(strings.TrimSpace(s), "`") }
		rows = append(rows, apiRow{unq(cells[0]), unq(cells[1]), unq(cells[2]), strings.TrimSpace(cells[3]), i + 1})
	}
	return rows
}

// goSymbols returns the exported top-level names of the package in dir:
// functions, types, values, and methods as "Type.Method".
func goSymbols(t *testing.T, dir string) map[string]bool {
	t.Helper()
	syms := map[string]bool{}
	pkgs, err := parser.ParseDir(token.NewFileSet(), dir, func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		return syms
	}
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					name := d.Name.Name
					if d.Recv != nil && len(d.Recv.List) == 1 {
						typ := d.Recv.List[0].Type
						if s, ok := typ.(*ast.StarExpr); ok {
							typ = s.X
						}
						if ix, ok := typ.(*ast.IndexExpr); ok {
							typ = ix.X
						}
						if id, ok := typ.(*ast.Ident); ok {
							name = id.Name + "." + name
						}
					}
					syms[name] = true
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.TypeSpec:
							syms[s.Name.Name] = true
						case *ast.ValueSpec:
							for _, n := range s.Names {
								syms[n.Name] = true
							}
						}
					}
				}
			}
		}
	}
	return syms
}

// TestKernelAPIDoc checks docs/kernel-api.md: every kernel name of kernelNames
// exactly once and in order, every Go identifier present in its package,
// every test function present in some _test.go file of the module.
func TestKernelAPIDoc(t *testing.T) {
	root := ".."
	rows := readAPIDoc(t, filepath.Join(root, "docs", "kernel-api.md"))
	tests := map[string]bool{}
	testFunc := regexp.MustCompile(`(?m)^func (Test\w+)\(`)
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err == nil {
			for _, m := range testFunc.FindAllStringSubmatch(string(b), -1) {
				tests[m[1]] = true
			}
		}
		return nil
	})
	seen := map[string]int{}
	for _, r := range rows {
		seen[r.kernel]++
	}
	for _, n := range kernelNames {
		if seen[n] != 1 {
			t.Errorf("%q appears %d times in docs/kernel-api.md, want once", n, seen[n])
		}
	}
	if len(rows) != len(kernelNames) {
		t.Errorf("%d rows, want %d", len(rows), len(kernelNames))
	}
	for i := range min(len(rows), len(kernelNames)) {
		if rows[i].kernel != kernelNames[i] {
			t.Errorf("row %d is %q, want %q (the issue's order)", i+1, rows[i].kernel, kernelNames[i])
			break
		}
	}
	symCache := map[string]map[string]bool{}
	for _, r := range rows {
		dot := strings.Index(r.ident, ".")
		if dot < 0 {
			t.Errorf("line %d: identifier %q is not package.Symbol", r.line, r.ident)
			continue
		}
		pkg, sym := r.ident[:dot], r.ident[dot+1:]
		syms, ok := symCache[pkg]
		if !ok {
			syms = goSymbols(t, filepath.Join(root, filepath.FromSlash(pkg)))
			symCache[pkg] = syms
		}
		if !syms[sym] {
			t.Errorf("line %d: %s: no such identifier", r.line, r.ident)
		}
		if !tests[r.test] {
			t.Errorf("line %d: %s: no func %s( in any _test.go file", r.line, r.kernel, r.test)
		}
	}
}
