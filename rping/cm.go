package rping

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"time"

	"github.com/softroce/softroce/cma"
	"github.com/softroce/softroce/emu"
	"github.com/softroce/softroce/qpstate"
)

// resolveTimeout is rping's rdma_resolve_addr and rdma_resolve_route
// timeout (2000 ms).
const resolveTimeout = 2 * time.Second

// disconnectWait bounds the client's wait for the DREP after its DREQ.
const disconnectWait = 5 * time.Second

// backlog is rping's rdma_listen backlog.
const backlog = 3

// channel is rping's rdma_event_channel. The CM calls handle with its lock
// held, so handle only queues the event; rping takes them in order with
// next. A DISCONNECTED event also closes disconnected, which the
// completion loop watches as rping's CM thread posts its semaphore. As
// ucma does for a listener, it refuses a CONNECT_REQUEST beyond the
// backlog of requests queued and not taken (the CM then drops the REQ).
type channel struct {
	mu           sync.Mutex
	queue        []cma.Event
	requests     int // CONNECT_REQUESTs in queue
	ready        chan struct{}
	disconnected chan struct{}
	once         sync.Once
}

func newChannel() *channel {
	return &channel{ready: make(chan struct{}, 1), disconnected: make(chan struct{})}
}

// handle is the IDs' cma.Handler.
func (ch *channel) handle(ev *cma.Event) error {
	e := *ev
	e.Conn.PrivateData = nil // the CM's buffer; rping sends and reads none
	ch.mu.Lock()
	if e.Type == cma.EventConnectRequest {
		if ch.requests >= backlog {
			ch.mu.Unlock()
			return errBacklog
		}
		ch.requests++
	}
	ch.queue = append(ch.queue, e)
	ch.mu.Unlock()
	if ev.Type == cma.EventDisconnected {
		ch.once.Do(func() { close(ch.disconnected) })
	}
	select {
	case ch.ready <- struct{}{}:
	default:
	}
	return nil
}

// errBacklog refuses a connection request beyond the backlog.
var errBacklog = errors.New("rping: backlog full")

// next returns the next event (rdma_get_cm_event), or ctx's error.
func (ch *channel) next(ctx context.Context) (cma.Event, error) {
	for {
		ch.mu.Lock()
		if len(ch.queue) > 0 {
			ev := ch.queue[0]
			ch.queue = ch.queue[1:]
			if ev.Type == cma.EventConnectRequest {
				ch.requests--
			}
			ch.mu.Unlock()
			return ev, nil
		}
		ch.mu.Unlock()
		select {
		case <-ch.ready:
		case <-ctx.Done():
			return cma.Event{}, ctx.Err()
		}
	}
}

// nextOf returns the next event of id other than TIMEWAIT_EXIT, which
// rping ignores.
func (ch *channel) nextOf(ctx context.Context, id *cma.ID) (cma.Event, error) {
	for {
		ev, err := ch.next(ctx)
		if err != nil || ev.ID == id && ev.Type != cma.EventTimewaitExit {
			return ev, err
		}
	}
}

// resolve is the client's rdma_resolve_addr and rdma_resolve_route: it
// returns ROUTE_RESOLVED, or the event that ended the resolution
// (ADDR_ERROR with the status).
func resolve(ctx context.Context, id *cma.ID, events *channel, dst netip.AddrPort) (cma.Event, error) {
	if err := id.ResolveAddr(netip.AddrPort{}, dst, resolveTimeout); err != nil {
		return cma.Event{}, err
	}
	ev, err := events.nextOf(ctx, id)
	if err != nil || ev.Type != cma.EventAddrResolved {
		return ev, err
	}
	if err := id.ResolveRoute(resolveTimeout); err != nil {
		return cma.Event{}, err
	}
	return events.nextOf(ctx, id)
}

// modify moves rping's QP through states with the attributes the CM gives
// (rdma_init_qp_attr), as librdmacm's ucma_modify_qp_rtr and
// ucma_modify_qp_rts do; with p (rdma_accept's), the RTR's responder
// resources and the RTS's initiator depth are p's. The RTR's destination
// MAC is resolved as for a userspace modify.
func (cb *session) modify(p *cma.ConnParam, states ...qpstate.State) error {
	for _, st := range states {
		a, m, err := cb.id.InitQPAttr(st)
		if err != nil {
			return err
		}
		if p != nil && st == qpstate.StateRTR {
			a.MaxDestRdAtomic = p.ResponderResources
		}
		if p != nil && st == qpstate.StateRTS {
			a.MaxRdAtomic = p.InitiatorDepth
		}
		if err := cb.qp.ModifyWithUdata(&a, m, &emu.UData{}); err != nil {
			return err
		}
	}
	return nil
}

// connect is the client's rdma_connect: the REQ with Param; on
// CONNECT_RESPONSE the QP goes to RTR and RTS and the RTU out, and the
// result is ESTABLISHED. Otherwise it is the event that ended the attempt
// (REJECTED with the reason, UNREACHABLE).
func (cb *session) connect(ctx context.Context) (cma.Event, error) {
	p := Param
	p.QPNum = cb.qp.QPNum()
	if err := cb.id.Connect(&p); err != nil {
		return cma.Event{}, err
	}
	ev, err := cb.events.nextOf(ctx, cb.id)
	if err != nil || ev.Type != cma.EventConnectResponse {
		return ev, err
	}
	if err := cb.modify(nil, qpstate.StateInit, qpstate.StateRTR, qpstate.StateRTS); err != nil {
		cb.id.Reject(nil, 0)
		return cma.Event{}, err
	}
	if err := cb.id.Accept(nil); err != nil {
		return cma.Event{}, err
	}
	return cma.Event{Type: cma.EventEstablished, ID: cb.id}, nil
}

// accept is the server's rdma_accept(id, NULL) of a request with req's
// parameters: the QP goes to RTR and RTS and the REP goes out with the
// request's depths (Param's for rping's client) and retry counts 7, as
// librdmacm fills a NULL conn_param; the result
// is the next event: ESTABLISHED once the RTU came.
func (cb *session) accept(ctx context.Context, req cma.ConnParam) (cma.Event, error) {
	p := cma.ConnParam{QPNum: cb.qp.QPNum(), ResponderResources: req.ResponderResources,
		InitiatorDepth: req.InitiatorDepth, RetryCount: 7, RNRRetryCount: 7}
	if err := cb.modify(&p, qpstate.StateInit, qpstate.StateRTR, qpstate.StateRTS); err != nil {
		cb.id.Reject(nil, 0)
		return cma.Event{}, err
	}
	if err := cb.id.Accept(&p); err != nil {
		return cma.Event{}, err
	}
	return cb.events.nextOf(ctx, cb.id)
}

// disconnect is rdma_disconnect: the QP goes to ERR, then the DREQ (or
// the DREP to the peer's DREQ) goes out.
func (cb *session) disconnect() {
	a := qpstate.Attr{QPState: qpstate.StateErr}
	cb.qp.Modify(&a, qpstate.AttrState)
	cb.id.Disconnect()
}
