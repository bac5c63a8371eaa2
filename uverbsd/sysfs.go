package uverbsd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/ib"
)

// The sysfs tree libibverbs reads through SYSFS_PATH when the RDMA netlink
// family is absent (libibverbs find_sysfs_devs, ibv_read_ibdev_sysfs_file),
// in the kernel's file names and formats (drivers/infiniband/core/sysfs.c,
// uverbs_main.c, ucma.c).
const (
	// UverbsABIVersion is class/infiniband_verbs/abi_version
	// (IB_USER_VERBS_ABI_VERSION).
	UverbsABIVersion = 6
	// UverbsMajor and UverbsBaseMinor are the char device numbers of
	// uverbs0 (IB_UVERBS_MAJOR, IB_UVERBS_BASE_MINOR).
	UverbsMajor, UverbsBaseMinor = 231, 192
	// UcmaABIVersion is class/misc/rdma_cm/abi_version
	// (RDMA_USER_CM_ABI_VERSION).
	UcmaABIVersion = 4
	// UmadABIVersion is class/infiniband_mad/abi_version
	// (IB_USER_MAD_ABI_VERSION).
	UmadABIVersion = 5
	// UmadMajor is the char device major of umadN and issmN
	// (IB_UMAD_MAJOR); IssmBaseMinor is issm0's minor
	// (IB_UMAD_NUM_FIXED_MINOR), umadN's is N.
	UmadMajor, IssmBaseMinor = 231, 64
	// UverbsNode is the verbs device node of a daemon's first device;
	// each device added later takes the lowest free uverbsN (as the
	// kernel's ib_uverbs_add_one allocates its devnum).
	UverbsNode = "uverbs0"
	// RDMACMNode is the rdma_cm device node (ucma's misc device).
	RDMACMNode = "rdma_cm"
	// MiscMajor and RDMACMMinor are the char device numbers of rdma_cm
	// (the misc major; the kernel's minor is dynamic).
	MiscMajor, RDMACMMinor = 10, 122
)

// sysfs writes and refreshes the entries of one device in the tree at
// root, which the daemon's other devices share (their own entries beside
// its).
//
// A device is visible once the tree is under its final name, and a
// program that sees it must be able to open it: the tree is built under a
// temporary name (the Server's publish renames it into place once its
// socket listens) and removed by renaming it away first. Every later
// change replaces one file with rename(2), so a reader sees the old file
// or the new one, never a missing or partial one.
type sysfs struct {
	dev  *emu.Device
	node string // the device's uverbs node (UverbsNode for the first)
	num  int    // N of its node uverbsN: minor UverbsBaseMinor+N

	mu   sync.Mutex        // serialises the tree's changes
	root string            // where the tree is now: its temporary or final name (mu)
	gone bool              // the tree was removed: refreshes write nothing (mu)
	gids map[string]string // what the last refresh wrote of the GID files, by path relative to root (mu)
}

// publish renames the tree from its temporary name to final, atomically
// for readers of final (it did not exist: New removed any stale tree).
// The entries of others (the daemon's other devices, in the same tree)
// move with it: none of them is refreshed meanwhile.
func (s *sysfs) publish(final string, others []*sysfs) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range others {
		o.mu.Lock()
		defer o.mu.Unlock()
	}
	if s.root == final {
		return nil
	}
	if err := os.Rename(s.root, final); err != nil {
		return fmt.Errorf("sysfs: publish: %w", err)
	}
	s.root = final
	for _, o := range others {
		o.root = final
	}
	return nil
}

// remove takes the tree away: renamed out of its published name first (a
// reader sees the whole tree or none), then deleted.
func (s *sysfs) remove() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gone = true
	return removeTree(s.root)
}

// markGone stops the refreshes: the whole tree was removed.
func (s *sysfs) markGone() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gone = true
}

// removeDevice takes the device's own entries out of the shared tree, its
// uverbs node first (libibverbs lists the devices by it, so a reader
// never finds the node without the device), as ib_unregister_device
// removes the device from the class.
func (s *sysfs) removeDevice() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone {
		return nil
	}
	s.gone = true
	return errors.Join(removeTree(filepath.Join(s.root, "class", "infiniband_verbs", s.node)),
		removeTree(filepath.Join(s.root, "class", "infiniband_mad", s.umadNode())),
		removeTree(filepath.Join(s.root, "class", "infiniband_mad", fmt.Sprintf("issm%d", s.num))),
		removeTree(filepath.Join(s.root, s.ibdevDir())))
}

// umadNode is the MAD device node of the device's port 1 (umadN).
func (s *sysfs) umadNode() string { return fmt.Sprintf("umad%d", s.num) }

// removeTree removes the tree at root (if any) by renaming it to a
// temporary name and deleting that.
func removeTree(root string) error {
	tmp := filepath.Join(filepath.Dir(root), fmt.Sprintf(".%s.old-%d", filepath.Base(root), os.Getpid()))
	if err := os.Rename(root, tmp); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	return os.RemoveAll(tmp)
}

// writeGIDFile writes a GID file unless it holds content already: a
// refresh rewrites only the slots that changed, and a reader of the others
// keeps its file (mu held).
func (s *sysfs) writeGIDFile(path, content string) error {
	if old, ok := s.gids[path]; ok && old == content {
		return nil
	}
	if err := writeFile(filepath.Join(s.root, path), content); err != nil {
		return err
	}
	if s.gids == nil {
		s.gids = map[string]string{}
	}
	s.gids[path] = content
	return nil
}

// writeFile replaces path's content atomically (a reader sees the old file
// or the new one, never a partial one), creating the directories above it.
// The new content is written to a hidden file beside path first, then
// renamed over it.
func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".new")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// guid formats a GUID as the kernel's node_guid_show: four big-endian
// 16-bit groups.
func guid(g uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], g)
	return fmt.Sprintf("%04x:%04x:%04x:%04x\n", binary.BigEndian.Uint16(b[0:]), binary.BigEndian.Uint16(b[2:]),
		binary.BigEndian.Uint16(b[4:]), binary.BigEndian.Uint16(b[6:]))
}

// gidString formats a GID as the kernel's "%pI6": eight groups of four hex
// digits, no compression.
func gidString(g emu.GID) string {
	s := ""
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			s += ":"
		}
		s += fmt.Sprintf("%02x%02x", g[i], g[i+1])
	}
	return s + "\n"
}

// rateString is rate_show: the port's data rate from its speed and width.
func rateString(a emu.PortAttr) string {
	speed, rate := " SDR", 25 // deci-Gb/s per lane; SDR for anything unknown
	switch a.ActiveSpeed {
	case emu.SpeedDDR:
		speed, rate = " DDR", 50
	case emu.SpeedQDR:
		speed, rate = " QDR", 100
	case emu.SpeedFDR10:
		speed, rate = " FDR10", 100
	case emu.SpeedFDR:
		speed, rate = " FDR", 140
	case emu.SpeedHDR:
		speed, rate = " HDR", 500
	case emu.SpeedNDR:
		speed, rate = " NDR", 1000
	case emu.SpeedXDR:
		speed, rate = " XDR", 2000
	case emu.SpeedEDR:
		speed, rate = " EDR", 250
	}
	lanes := a.ActiveWidth.Lanes()
	rate *= lanes
	half := ""
	if rate%10 != 0 {
		half = ".5"
	}
	return fmt.Sprintf("%d%s Gb/sec (%dX%s)\n", rate/10, half, lanes, speed)
}

// gidTypeString is ib_cache_gid_type_str: the gid_attrs/types file.
func gidTypeString(t ib.GIDType) string {
	switch t {
	case ib.GIDTypeRoCEv2:
		return "RoCE v2\n"
	case ib.GIDTypeIB, ib.GIDTypeRoCE:
		return "IB/RoCE v1\n"
	}
	return "\n"
}

var stateNames = [...]string{"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"}

var physNames = map[emu.PhysState]string{
	emu.PhysSleep: "Sleep", emu.PhysPolling: "Polling", emu.PhysDisabled: "Disabled",
	emu.PhysTraining: "PortConfigurationTraining", emu.PhysLinkUp: "LinkUp",
	emu.PhysLinkErr: "LinkErrorRecovery", emu.PhysPHYTest: "Phy Test",
}

func (s *sysfs) ibdevDir() string {
	return filepath.Join("class", "infiniband", s.dev.Name())
}

// write creates the device's entries (and the class files all devices
// share) in the tree at root: the tree's temporary name for the daemon's
// first device, the published tree for one added later. The uverbs node
// comes last: libibverbs lists a device by it, and finds the rest
// written then.
func (s *sysfs) write() error {
	a := s.dev.Query()
	files := map[string]string{
		"class/infiniband_verbs/abi_version": fmt.Sprintf("%d\n", UverbsABIVersion),
		"class/misc/rdma_cm/abi_version":     fmt.Sprintf("%d\n", UcmaABIVersion),
		"class/misc/rdma_cm/dev":             fmt.Sprintf("%d:%d\n", MiscMajor, RDMACMMinor),
		// ib_umad's class attribute (libibumad's umad_init).
		"class/infiniband_mad/abi_version": fmt.Sprintf("%d\n", UmadABIVersion),
	}
	node := map[string]string{
		"class/infiniband_verbs/" + s.node + "/ibdev":       s.dev.Name() + "\n",
		"class/infiniband_verbs/" + s.node + "/dev":         fmt.Sprintf("%d:%d\n", UverbsMajor, UverbsBaseMinor+s.num),
		"class/infiniband_verbs/" + s.node + "/abi_version": fmt.Sprintf("%d\n", a.UverbsABIVer),
	}
	// ib_umad's port files (libibumad's umad_id_to_dev): umadN and issmN
	// of the device's port 1, N the device's number.
	for _, m := range []struct {
		node  string
		minor int
	}{{s.umadNode(), s.num}, {fmt.Sprintf("issm%d", s.num), IssmBaseMinor + s.num}} {
		dir := filepath.Join("class", "infiniband_mad", m.node)
		files[filepath.Join(dir, "ibdev")] = s.dev.Name() + "\n"
		files[filepath.Join(dir, "port")] = "1\n"
		files[filepath.Join(dir, "dev")] = fmt.Sprintf("%d:%d\n", UmadMajor, m.minor)
	}
	ib := filepath.Join("class", "infiniband", s.dev.Name())
	files[filepath.Join(ib, "node_type")] = fmt.Sprintf("%d: CA\n", a.NodeType)
	files[filepath.Join(ib, "node_guid")] = guid(a.NodeGUID)
	files[filepath.Join(ib, "sys_image_guid")] = guid(a.SysImageGUID)
	files[filepath.Join(ib, "node_desc")] = a.NodeDesc + "\n"
	files[filepath.Join(ib, "fw_ver")] = "\n" // rxe has no get_dev_fw_str
	for port := range s.dev.Ports() {
		pa, err := s.dev.QueryPort(port)
		if err != nil {
			return err
		}
		pd := filepath.Join(ib, "ports", strconv.Itoa(int(port)))
		for name, content := range portStateFiles(pa) {
			files[filepath.Join(pd, name)] = content
		}
		ll := "Unknown"
		switch s.dev.LinkLayer(port) {
		case emu.LinkLayerInfiniBand:
			ll = "InfiniBand"
		case emu.LinkLayerEthernet:
			ll = "Ethernet"
		}
		files[filepath.Join(pd, "lid")] = fmt.Sprintf("0x%x\n", pa.LID)
		files[filepath.Join(pd, "lid_mask_count")] = fmt.Sprintf("%d\n", pa.LMC)
		files[filepath.Join(pd, "sm_lid")] = fmt.Sprintf("0x%x\n", pa.SMLID)
		files[filepath.Join(pd, "sm_sl")] = fmt.Sprintf("%d\n", pa.SMSL)
		files[filepath.Join(pd, "cap_mask")] = fmt.Sprintf("0x%08x\n", pa.PortCapFlags)
		files[filepath.Join(pd, "link_layer")] = ll + "\n"
		for i := 0; i < int(pa.PKeyTblLen); i++ {
			if pk, err := s.dev.QueryPKey(port, uint16(i)); err == nil {
				files[filepath.Join(pd, "pkeys", strconv.Itoa(i))] = fmt.Sprintf("0x%04x\n", pk)
			}
		}
	}
	s.mu.Lock()
	root := s.root
	s.mu.Unlock()
	for name, content := range files {
		if err := writeFile(filepath.Join(root, name), content); err != nil {
			return fmt.Errorf("sysfs: %w", err)
		}
	}
	if err := s.refreshGIDs(); err != nil {
		return err
	}
	// The node's directory appears whole: built beside, then renamed.
	tmp := filepath.Join(root, "class", "infiniband_verbs", "."+s.node+".new")
	os.RemoveAll(tmp)
	for name, content := range node {
		if err := writeFile(filepath.Join(tmp, filepath.Base(name)), content); err != nil {
			return fmt.Errorf("sysfs: %w", err)
		}
	}
	if err := os.Rename(tmp, filepath.Join(root, "class", "infiniband_verbs", s.node)); err != nil {
		return fmt.Errorf("sysfs: %w", err)
	}
	return nil
}

// portStateFiles are the files of a port that follow its state
// (state_show, phys_state_show, rate_show), by name.
func portStateFiles(pa emu.PortAttr) map[string]string {
	state := "UNKNOWN"
	if pa.State >= 0 && int(pa.State) < len(stateNames) {
		state = stateNames[pa.State]
	}
	phys, ok := physNames[pa.PhysState]
	if !ok {
		phys = "<unknown>"
	}
	return map[string]string{
		"state":      fmt.Sprintf("%d: %s\n", pa.State, state),
		"phys_state": fmt.Sprintf("%d: %s\n", pa.PhysState, phys),
		"rate":       rateString(pa),
	}
}

// refreshPorts rewrites the files of each port that follow its state,
// each replaced atomically, after a port event (IB_EVENT_PORT_ACTIVE,
// IB_EVENT_PORT_ERR), as the kernel's attributes read the port's state
// when read.
func (s *sysfs) refreshPorts() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone {
		return nil
	}
	for port := range s.dev.Ports() {
		pa, err := s.dev.QueryPort(port)
		if err != nil {
			return err
		}
		pd := filepath.Join(s.root, s.ibdevDir(), "ports", strconv.Itoa(int(port)))
		for name, content := range portStateFiles(pa) {
			if err := writeFile(filepath.Join(pd, name), content); err != nil {
				return fmt.Errorf("sysfs: %w", err)
			}
		}
	}
	return nil
}

// kernelInterface reports whether the kernel has a network interface
// named name in the daemon's namespace.
func kernelInterface(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}

// refreshGIDs rewrites ports/N/gids/I, gid_attrs/types/I and
// gid_attrs/ndevs/I from the device's GID table: an empty slot reads as
// the zero GID, its type and its netdev are empty files (the kernel's
// reads fail there).
func (s *sysfs) refreshGIDs() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone {
		return nil
	}
	for port := range s.dev.Ports() {
		pa, err := s.dev.QueryPort(port)
		if err != nil {
			return err
		}
		pd := filepath.Join(s.ibdevDir(), "ports", strconv.Itoa(int(port)))
		for i := 0; i < pa.GIDTblLen; i++ {
			idx := strconv.Itoa(i)
			typ := filepath.Join(pd, "gid_attrs", "types", idx)
			ndev := filepath.Join(pd, "gid_attrs", "ndevs", idx)
			e, err := s.dev.QueryGID(port, i)
			if err != nil {
				if err := s.writeGIDFile(filepath.Join(pd, "gids", idx), gidString(emu.GID{})); err != nil {
					return fmt.Errorf("sysfs: %w", err)
				}
				// The kernel's type attribute of an unused slot exists
				// and its read fails: an empty file, which the preload
				// library reads as EINVAL.
				if err := s.writeGIDFile(typ, ""); err != nil {
					return fmt.Errorf("sysfs: %w", err)
				}
				if err := s.writeGIDFile(ndev, ""); err != nil {
					return fmt.Errorf("sysfs: %w", err)
				}
				continue
			}
			// Type first, GID last: a reader that sees the new GID
			// also sees its type.
			if err := s.writeGIDFile(typ, gidTypeString(e.Type)); err != nil {
				return fmt.Errorf("sysfs: %w", err)
			}
			// libibverbs turns the netdev's name into the entry's
			// ndev_ifindex (if_nametoindex) and fails the query where
			// the kernel has no such interface: a link the kernel does
			// not see (in memory, UDP) gives the GID the ndevs file of
			// a GID without a netdev, whose read fails (an empty file:
			// EINVAL through the preload library; libibverbs takes
			// ifindex 0). Every slot has the file, as the kernel's.
			name := ""
			if e.NetDev != "" && kernelInterface(e.NetDev) {
				name = e.NetDev + "\n"
			}
			if err := s.writeGIDFile(ndev, name); err != nil {
				return fmt.Errorf("sysfs: %w", err)
			}
			if err := s.writeGIDFile(filepath.Join(pd, "gids", idx), gidString(e.GID)); err != nil {
				return fmt.Errorf("sysfs: %w", err)
			}
		}
	}
	return nil
}
