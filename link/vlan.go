package link

import (
	"encoding/binary"
	"fmt"
	"sync"
	"syscall"
)

// VLAN is an 802.1Q VLAN interface on a link, as `ip link add link L
// name L.ID type vlan id ID` makes one: frames written to it leave on the
// link tagged with the VLAN ID, and of the frames the link reads it
// returns those tagged with its ID, untagged; untagged frames and other
// VLANs' are not its own and are dropped. The tag's priority (PCP) is 0:
// rxe leaves skb->priority at 0 whatever the QP's service level or traffic
// class, and a VLAN device's default egress map sends priority 0 as PCP 0.
// The MTU is the link's, as a VLAN device's is its parent's.
type VLAN struct {
	l   Link
	id  uint16
	mu  sync.Mutex // guards wbufs
	rmu sync.Mutex // guards rbufs and rsizes
	// wbufs and rbufs are the tagged copies of a batch.
	wbufs, rbufs [][]byte
	rsizes       []int
}

// NewVLAN returns the VLAN id (1 to 4094) on l. It owns l from then on:
// closing the VLAN closes l. It fails with EINVAL for another ID.
func NewVLAN(l Link, id uint16) (*VLAN, error) {
	if id < 1 || id > 4094 {
		return nil, fmt.Errorf("link: VLAN ID %d outside [1, 4094]: %w", id, syscall.EINVAL)
	}
	return &VLAN{l: l, id: id}, nil
}

// VLANID returns the VLAN's ID.
func (v *VLAN) VLANID() uint16 { return v.id }

// Name returns the VLAN interface's name: the link's name (if it has one)
// and the ID, "NAME.ID".
func (v *VLAN) Name() string {
	if n, ok := v.l.(interface{ Name() string }); ok && n.Name() != "" {
		return fmt.Sprintf("%s.%d", n.Name(), v.id)
	}
	return ""
}

// WatchCarrier watches the link's carrier when the link can (a VLAN
// device's carrier follows its parent's); otherwise it watches nothing.
func (v *VLAN) WatchCarrier(f func(up, carrier bool)) (stop func(), err error) {
	if w, ok := v.l.(interface {
		WatchCarrier(func(up, carrier bool)) (func(), error)
	}); ok {
		return w.WatchCarrier(f)
	}
	return func() {}, nil
}

// ReadPackets reads frames of the VLAN, untagged (see Link).
func (v *VLAN) ReadPackets(bufs [][]byte, sizes []int) (int, error) {
	v.rmu.Lock()
	defer v.rmu.Unlock()
	if len(v.rbufs) < len(bufs) {
		v.rbufs = make([][]byte, len(bufs))
		v.rsizes = make([]int, len(bufs))
	}
	for i := range bufs {
		if cap(v.rbufs[i]) < len(bufs[i])+VLANTagSize {
			v.rbufs[i] = make([]byte, len(bufs[i])+VLANTagSize)
		}
		v.rbufs[i] = v.rbufs[i][:len(bufs[i])+VLANTagSize]
	}
	for {
		n, err := v.l.ReadPackets(v.rbufs[:len(bufs)], v.rsizes[:len(bufs)])
		j := 0
		for i := 0; i < n; i++ {
			f := v.rbufs[i][:v.rsizes[i]]
			if len(f) < EthernetHeaderSize+VLANTagSize || binary.BigEndian.Uint16(f[12:]) != 0x8100 ||
				binary.BigEndian.Uint16(f[14:])&0x0fff != v.id {
				continue
			}
			m := copy(bufs[j], f[:12])
			m += copy(bufs[j][m:], f[16:])
			sizes[j] = m
			j++
		}
		if j > 0 || err != nil {
			return j, err
		}
	}
}

// WritePackets writes frames to the VLAN: each leaves the link tagged (see
// Link).
func (v *VLAN) WritePackets(bufs [][]byte) (int, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.wbufs) < len(bufs) {
		v.wbufs = append(v.wbufs, make([][]byte, len(bufs)-len(v.wbufs))...)
	}
	for i, f := range bufs {
		if err := CheckFrame(f, v.l.MTU()); err != nil {
			return i, fmt.Errorf("link: VLAN %d: %w", v.id, err)
		}
		t := append(v.wbufs[i][:0], f[:12]...)
		t = binary.BigEndian.AppendUint16(t, 0x8100)
		t = binary.BigEndian.AppendUint16(t, v.id) // PCP 0, DEI 0
		v.wbufs[i] = append(t, f[12:]...)
	}
	return v.l.WritePackets(v.wbufs[:len(bufs)])
}

// BatchSize returns the link's.
func (v *VLAN) BatchSize() int { return v.l.BatchSize() }

// MTU returns the link's.
func (v *VLAN) MTU() int { return v.l.MTU() }

// Close closes the link.
func (v *VLAN) Close() error { return v.l.Close() }

var _ Link = (*VLAN)(nil)
