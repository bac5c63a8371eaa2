package link

import (
	"errors"
	"net"
	"sync"
)

// Hub is an in-memory Ethernet switch: the fabric of several stations in
// one process, as the netdevs of one host's rxe devices share a LAN. Each
// Attach gives a station its port, one end of a pipe whose other end the
// Hub reads. A frame goes to the port that last sent from its destination
// MAC (the Hub learns the source MAC of every frame); a broadcast,
// multicast or unknown unicast frame goes to every other port. A port
// whose queue is full drops the frame, as a switch's output queue does.
// It is safe for concurrent use.
type Hub struct {
	cfg PipeConfig

	mu     sync.Mutex
	ports  map[*port]struct{}
	fdb    map[[6]byte]*port // learned source MACs
	closed bool
	wg     sync.WaitGroup
}

// HubPort is a station's end of its port on a Hub: a Link whose Close
// also detaches the port.
type HubPort struct {
	*PipeEnd
	port *port
	name string
}

// Name returns the name AttachAs gave the port ("" for Attach's): the
// station's netdev name.
func (p *HubPort) Name() string { return p.name }

// port is one port of a Hub: the Hub's end of a pipe to a station.
type port struct {
	near *PipeEnd
}

var _ Link = (*HubPort)(nil)

// NewHub returns a Hub whose ports are pipes configured by cfg (nil means
// the defaults, except that DropWhenFull is always set: the Hub never
// waits for a slow station).
func NewHub(cfg *PipeConfig) *Hub {
	h := &Hub{ports: map[*port]struct{}{}, fdb: map[[6]byte]*port{}}
	if cfg != nil {
		h.cfg = *cfg
	}
	h.cfg.DropWhenFull = true
	return h
}

// Attach adds a port and returns the station's end of it; closing that
// end detaches the port. Attach on a closed Hub returns an error wrapping
// net.ErrClosed.
func (h *Hub) Attach() (*HubPort, error) { return h.AttachAs("") }

// AttachAs is Attach of a port named name (HubPort.Name).
func (h *Hub) AttachAs(name string) (*HubPort, error) {
	station, near := NewPipe(&h.cfg)
	p := &port{near: near}
	if err := h.add(p); err != nil {
		return nil, err
	}
	return &HubPort{PipeEnd: station, port: p, name: name}, nil
}

// Connect makes near, the end of a pipe whose other end a station already
// has (a node's default in-memory link), a port of the Hub: the station
// joins the fabric as if cabled to it. The Hub closes near when it
// closes.
func (h *Hub) Connect(near *PipeEnd) error {
	return h.add(&port{near: near})
}

// add adds p and starts its forwarding.
func (h *Hub) add(p *port) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return &net.OpError{Op: "attach", Net: "hub", Err: net.ErrClosed}
	}
	h.ports[p] = struct{}{}
	h.wg.Add(1)
	go h.forward(p)
	return nil
}

// Close closes the station's end and detaches the port from the Hub.
func (p *HubPort) Close() error {
	err := p.PipeEnd.Close()
	p.port.near.Close()
	return err
}

// Ports returns how many ports are attached.
func (h *Hub) Ports() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ports)
}

// Close detaches every port (their stations' reads and writes fail from
// then on) and waits for the Hub's forwarding to end.
func (h *Hub) Close() error {
	h.mu.Lock()
	h.closed = true
	ports := make([]*port, 0, len(h.ports))
	for p := range h.ports {
		ports = append(ports, p)
	}
	h.mu.Unlock()
	for _, p := range ports {
		p.near.Close()
	}
	h.wg.Wait()
	return nil
}

// forward reads what p's station sends and passes it on, until the port
// is detached.
func (h *Hub) forward(p *port) {
	defer h.wg.Done()
	defer h.detach(p)
	n := max(1, p.near.BatchSize())
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, MaxFrameSize(p.near.MTU()))
	}
	sizes := make([]int, n)
	var out []*port
	for {
		got, err := p.near.ReadPackets(bufs, sizes)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		for i := range got {
			frame := bufs[i][:sizes[i]]
			if len(frame) < EthernetHeaderSize {
				continue
			}
			out = h.route(p, frame, out[:0])
			for _, q := range out {
				q.near.WritePackets([][]byte{frame})
			}
		}
	}
}

// route learns frame's source MAC on port from and returns the ports the
// frame goes to.
func (h *Hub) route(from *port, frame []byte, out []*port) []*port {
	dst, src := [6]byte(frame[0:6]), [6]byte(frame[6:12])
	h.mu.Lock()
	defer h.mu.Unlock()
	if src[0]&1 == 0 {
		h.fdb[src] = from
	}
	if dst[0]&1 == 0 {
		if q, ok := h.fdb[dst]; ok {
			if q != from {
				out = append(out, q)
			}
			return out
		}
	}
	for q := range h.ports {
		if q != from {
			out = append(out, q)
		}
	}
	return out
}

// detach takes p off the Hub and forgets the MACs learned on it.
func (h *Hub) detach(p *port) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.ports, p)
	for mac, q := range h.fdb {
		if q == p {
			delete(h.fdb, mac)
		}
	}
}
