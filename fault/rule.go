// Package fault is fault injection aimed at a program's error paths: rules
// that make the rare things happen on demand in a daemon's device (package
// uverbsd), deterministically for a seed.
//
// A rule is one line of text, KIND:ACTION followed by KEY=VALUE options
// separated by commas:
//
//	wire:drop,qp=0x11,opcode=RDMA_WRITE_FIRST,nth=3   drop the 3rd RDMA WRITE FIRST packet to QP 0x11
//	wire:corrupt,prob=0.05                            flip a bit in 5 % of the RoCE frames
//	wire:duplicate,psn=100-200,count=10               duplicate up to 10 packets with PSN 100..200
//	wire:reorder,opcode=SEND_ONLY                     hold each SEND ONLY back behind the next frame
//	wire:delay,qp=0x12                                delay every packet to QP 0x12
//	qp:silent,qp=0x11                                 QP 0x11 answers nothing: its peer's retries run out
//	qp:err,qp=0x11,at=1s                              QP 0x11 moves to ERR 1 s after the rule is added (flushes)
//	qp:err,qp=0x11,after=100                          ... once 100 of its work requests have completed
//	qp:rnr,qp=0x11,count=3                            the next 3 SENDs to QP 0x11 are answered with an RNR NAK
//	qp:invalidate,rkey=0x1234                         requests naming R_Key 0x1234 are refused (remote access error)
//	cq:overflow,qp=0x11                               the next completion for QP 0x11's CQs finds them full (IB_EVENT_CQ_ERR)
//	cq:delay,qp=0x11,by=50ms,count=4                  the next 4 completions for QP 0x11's CQs arrive 50 ms late
//	verbs:fail,verb=create_qp,errno=ENOMEM            the next CREATE_QP command fails with ENOMEM
//	verbs:fail,verb=post_send,errno=EAGAIN,count=3    the next 3 POST_SEND commands fail with EAGAIN
//	port:down                                         the port goes down (IB_EVENT_PORT_ERR)
//	port:up,at=2s                                     ... and up 2 s after the rule is added (IB_EVENT_PORT_ACTIVE)
//	port:gid,ip=10.0.0.9/24                           a new address: a new GID (IB_EVENT_GID_CHANGE)
//
// Wire rules act on the RoCE frames the device sends (its own loopback
// included), chosen by the destination QP (qp=), the opcode (opcode=, the
// kernel's name without IB_OPCODE_, with or without the transport: RC_SEND_ONLY
// or SEND_ONLY) and the PSN (psn=N or psn=LO-HI); among those, on every
// one, on each with probability prob=P, or from the nth=N-th one on; at
// most count=K times (default: 1 with nth, no bound otherwise). The faults
// are those of package link (link.Faults). Verb rules fail uverbs commands
// by name (the command's name in ib_user_verbs.h, lower case, without
// IB_USER_VERBS_[EX_]CMD_: create_qp, modify_qp, post_send, reg_mr, ...) with
// an errno, before the command reaches the device, as a driver could. Port
// rules and qp:err act once, when added or at=DURATION later. qp:rnr stands
// in for the responder QP: the SEND (its first or only packet) never
// reaches it, and the requester gets an RNR NAK with the QP's
// min_rnr_timer, as from a responder with no receive posted (count:
// default 1). qp:invalidate rewrites the R_Key of the requests naming it
// (RETH, AtomicETH) to one no MR has, so the responder's check_rkey
// refuses them as it refuses an invalidated key.
//
// CQ rules name the CQs by a QP that uses them (its send and receive CQ),
// which must exist when the rule is added; overflow acts once by default
// (count), delay on every completion unless count bounds it.
//
// Parse is strict: an unknown kind, action or key, a key the action does
// not take, a repeated key or a bad value is an error that says which.
// Rule.String gives the canonical form (keys in a fixed order), which
// Parse reads back to the same rule.
package fault

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/wire"
)

// Kind is what a rule acts on.
type Kind uint8

// The kinds; zero is invalid.
const (
	KindWire Kind = iota + 1
	KindQP
	KindVerbs
	KindPort
	KindCQ
)

var kindNames = map[Kind]string{KindWire: "wire", KindQP: "qp", KindVerbs: "verbs", KindPort: "port", KindCQ: "cq"}

// String returns the kind's name in the rule syntax.
func (k Kind) String() string {
	if n, ok := kindNames[k]; ok {
		return n
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Actions returns every KIND:ACTION the syntax has, in a fixed order.
func Actions() []string {
	var out []string
	for _, k := range []Kind{KindWire, KindQP, KindCQ, KindVerbs, KindPort} {
		for _, a := range actionNames(k) {
			out = append(out, k.String()+":"+a)
		}
	}
	return out
}

// IsValid reports whether k is one of the kinds.
func (k Kind) IsValid() bool { _, ok := kindNames[k]; return ok }

// actions are each kind's actions, and the keys each action takes.
var actions = map[Kind]map[string][]string{
	KindWire: {
		"drop": wireKeys, "duplicate": wireKeys, "reorder": wireKeys, "corrupt": wireKeys, "delay": wireKeys,
	},
	KindQP: {"silent": {"qp"}, "err": {"qp", "at", "after"}, "rnr": {"qp", "count"},
		"invalidate": {"rkey", "qp", "count"}},
	KindVerbs: {"fail": {"verb", "errno", "count"}},
	KindCQ:    {"overflow": {"qp", "count"}, "delay": {"qp", "by", "count"}},
	KindPort:  {"down": {"at"}, "up": {"at"}, "gid": {"ip", "at"}},
}

var wireKeys = []string{"qp", "opcode", "psn", "prob", "nth", "count"}

// keyOrder is the order String writes keys in.
var keyOrder = []string{"qp", "rkey", "opcode", "psn", "prob", "nth", "verb", "errno", "by", "count", "ip", "at", "after"}

// Rule is one parsed fault rule. Fields a kind does not use are zero.
type Rule struct {
	Kind   Kind
	Action string // "drop", "silent", "fail", "down", ...

	QP     uint32 // destination QP number (HasQP)
	HasQP  bool
	Opcode string // wire.Opcode name, with or without the transport ("" = any)
	PSNLo  uint32 // PSN range, inclusive (HasPSN)
	PSNHi  uint32
	HasPSN bool
	Prob   float64 // 0 = every matching packet
	Nth    uint64  // 0 = from the first matching packet
	Count  uint64  // applications at most; 0 = no bound

	RKey    uint32 // for qp:invalidate (HasRKey)
	HasRKey bool

	Verb  string     // uverbs command, lower case, without the prefix
	Errno unix.Errno // for verbs:fail

	By    time.Duration // for cq:delay
	After uint64        // for qp:err: after this many of the QP's work requests completed

	IP netip.Prefix  // for port:gid
	At time.Duration // for port rules and qp:err: after the rule is added
}

// maxRule bounds a rule's text.
const maxRule = 1024

// Parse parses one rule (see the package comment for the syntax).
func Parse(s string) (*Rule, error) {
	r, err := parse(s)
	if err != nil {
		if len(s) > 64 {
			s = s[:64] + "..."
		}
		return nil, fmt.Errorf("fault: rule %q: %w", s, err)
	}
	return r, nil
}

func parse(s string) (*Rule, error) {
	if len(s) > maxRule {
		return nil, fmt.Errorf("longer than %d bytes", maxRule)
	}
	head, opts, _ := strings.Cut(s, ",")
	kind, action, ok := strings.Cut(head, ":")
	if !ok {
		return nil, errors.New("want KIND:ACTION[,KEY=VALUE...] (kinds: wire, qp, cq, verbs, port)")
	}
	r := &Rule{Action: action}
	for k, n := range kindNames {
		if n == kind {
			r.Kind = k
		}
	}
	if r.Kind == 0 {
		return nil, fmt.Errorf("unknown kind %q (wire, qp, cq, verbs, port)", kind)
	}
	keys, ok := actions[r.Kind][action]
	if !ok {
		return nil, fmt.Errorf("unknown action %q for %s (%s)", action, kind, strings.Join(actionNames(r.Kind), ", "))
	}
	seen := map[string]bool{}
	if opts != "" {
		for _, kv := range strings.Split(opts, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || v == "" {
				return nil, fmt.Errorf("option %q: want KEY=VALUE", kv)
			}
			if !contains(keys, k) {
				return nil, fmt.Errorf("%s:%s takes no %q (it takes: %s)", kind, action, k, strings.Join(keys, ", "))
			}
			if seen[k] {
				return nil, fmt.Errorf("%q given twice", k)
			}
			seen[k] = true
			if err := r.set(k, v); err != nil {
				return nil, fmt.Errorf("%s=%s: %w", k, v, err)
			}
		}
	}
	switch {
	case r.Kind == KindCQ && !r.HasQP:
		return nil, fmt.Errorf("cq:%s needs qp=QPN (the QP whose CQs)", action)
	case r.Kind == KindCQ && action == "delay" && r.By == 0:
		return nil, errors.New("cq:delay needs by=DURATION")
	case r.Kind == KindQP && action == "invalidate" && !r.HasRKey:
		return nil, errors.New("qp:invalidate needs rkey=KEY")
	case r.Kind == KindQP && action != "invalidate" && !r.HasQP:
		return nil, fmt.Errorf("qp:%s needs qp=QPN", action)
	case r.Kind == KindVerbs && (r.Verb == "" || r.Errno == 0):
		return nil, errors.New("verbs:fail needs verb=NAME and errno=ENAME")
	case r.Kind == KindPort && action == "gid" && !r.IP.IsValid():
		return nil, errors.New("port:gid needs ip=ADDR[/LEN]")
	case r.At != 0 && r.After != 0:
		return nil, errors.New("at and after exclude each other")
	case r.Prob != 0 && r.Nth != 0:
		return nil, errors.New("prob and nth exclude each other")
	}
	return r, nil
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func actionNames(k Kind) []string {
	var out []string
	for _, a := range []string{"drop", "duplicate", "reorder", "corrupt", "delay", "silent", "err", "rnr", "invalidate",
		"overflow", "fail", "down", "up", "gid"} {
		if _, ok := actions[k][a]; ok {
			out = append(out, a)
		}
	}
	return out
}

// opcodeNames maps every valid opcode's name, and its operation name
// without the transport ("SEND_ONLY"), to true.
var opcodeNames = sync.OnceValue(func() map[string]bool {
	m := map[string]bool{}
	for i := 0; i < 256; i++ {
		op := wire.Opcode(i)
		if !op.IsValid() {
			continue
		}
		n := op.String()
		m[n] = true
		if _, rest, ok := strings.Cut(n, "_"); ok && (strings.HasPrefix(n, "RC_") || strings.HasPrefix(n, "UC_") ||
			strings.HasPrefix(n, "UD_") || strings.HasPrefix(n, "RD_")) {
			m[rest] = true
		}
	}
	return m
})

// MatchOpcode reports whether op is the rule's opcode (any when the rule
// names none).
func (r *Rule) MatchOpcode(op wire.Opcode) bool {
	if r.Opcode == "" {
		return true
	}
	n := op.String()
	if n == r.Opcode {
		return true
	}
	_, rest, ok := strings.Cut(n, "_")
	return ok && rest == r.Opcode && n != "CNP"
}

// errnos maps errno names to values.
var errnos = sync.OnceValue(func() map[string]unix.Errno {
	m := map[string]unix.Errno{}
	for e := unix.Errno(1); e < 256; e++ {
		if n := unix.ErrnoName(e); n != "" {
			if _, dup := m[n]; !dup {
				m[n] = e
			}
		}
	}
	return m
})

func parseUint(v string, bits int) (uint64, error) {
	n, err := strconv.ParseUint(v, 0, bits)
	if err != nil {
		return 0, errors.New("not a number (decimal, or hex with 0x)")
	}
	return n, nil
}

func (r *Rule) set(k, v string) error {
	switch k {
	case "qp":
		n, err := parseUint(v, 24)
		if err != nil {
			return fmt.Errorf("a QP number is 24 bits: %w", err)
		}
		r.QP, r.HasQP = uint32(n), true
	case "rkey":
		n, err := parseUint(v, 32)
		if err != nil {
			return fmt.Errorf("an R_Key is 32 bits: %w", err)
		}
		r.RKey, r.HasRKey = uint32(n), true
	case "opcode":
		up := strings.ToUpper(v)
		if !opcodeNames()[up] {
			return errors.New("not an opcode (the kernel's name without IB_OPCODE_: SEND_ONLY, RC_RDMA_WRITE_FIRST, ACKNOWLEDGE, ...)")
		}
		r.Opcode = up
	case "psn":
		lo, hi, rng := strings.Cut(v, "-")
		a, err := parseUint(lo, 24)
		if err != nil {
			return fmt.Errorf("a PSN is 24 bits: %w", err)
		}
		b := a
		if rng {
			if b, err = parseUint(hi, 24); err != nil {
				return fmt.Errorf("a PSN is 24 bits: %w", err)
			}
			if b < a {
				return errors.New("the range ends before it starts")
			}
		}
		r.PSNLo, r.PSNHi, r.HasPSN = uint32(a), uint32(b), true
	case "prob":
		p, err := strconv.ParseFloat(v, 64)
		if err != nil || !(p > 0 && p <= 1) {
			return errors.New("a probability in (0, 1]")
		}
		r.Prob = p
	case "nth":
		n, err := parseUint(v, 64)
		if err != nil || n == 0 {
			return errors.New("counts from 1")
		}
		r.Nth = n
	case "count":
		n, err := parseUint(v, 64)
		if err != nil || n == 0 {
			return errors.New("at least 1")
		}
		r.Count = n
	case "verb":
		v = strings.ToLower(v)
		if !KnownVerb(v) {
			return errors.New("not a uverbs command (create_qp, modify_qp, post_send, reg_mr, create_cq, ...)")
		}
		r.Verb = v
	case "errno":
		e, ok := errnos()[strings.ToUpper(v)]
		if !ok {
			return errors.New("not an errno name (ENOMEM, EAGAIN, EINVAL, ...)")
		}
		r.Errno = e
	case "ip":
		var p netip.Prefix
		var err error
		if strings.Contains(v, "/") {
			p, err = netip.ParsePrefix(v)
		} else {
			var a netip.Addr
			a, err = netip.ParseAddr(v)
			if err == nil {
				p = netip.PrefixFrom(a, a.BitLen())
			}
		}
		if err != nil || p.Addr().Zone() != "" {
			return errors.New("an IP address, with or without a prefix length")
		}
		r.IP = netip.PrefixFrom(p.Addr().Unmap(), min(p.Bits(), p.Addr().Unmap().BitLen()))
	case "at":
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return errors.New("a duration (100ms, 2s)")
		}
		r.At = d
	case "after":
		n, err := parseUint(v, 64)
		if err != nil || n == 0 {
			return errors.New("at least 1 (work requests completed)")
		}
		r.After = n
	case "by":
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > time.Hour {
			return errors.New("a duration from 1ns to 1h (100ms, 2s)")
		}
		r.By = d
	}
	return nil
}

// String returns the rule in its canonical form.
func (r *Rule) String() string {
	var b strings.Builder
	b.WriteString(r.Kind.String())
	b.WriteByte(':')
	b.WriteString(r.Action)
	for _, k := range keyOrder {
		v, ok := r.value(k)
		if ok {
			b.WriteString("," + k + "=" + v)
		}
	}
	return b.String()
}

func (r *Rule) value(k string) (string, bool) {
	switch k {
	case "qp":
		return fmt.Sprintf("%#x", r.QP), r.HasQP
	case "rkey":
		return fmt.Sprintf("%#x", r.RKey), r.HasRKey
	case "opcode":
		return r.Opcode, r.Opcode != ""
	case "psn":
		if r.PSNLo == r.PSNHi {
			return strconv.FormatUint(uint64(r.PSNLo), 10), r.HasPSN
		}
		return fmt.Sprintf("%d-%d", r.PSNLo, r.PSNHi), r.HasPSN
	case "prob":
		return strconv.FormatFloat(r.Prob, 'g', -1, 64), r.Prob != 0
	case "nth":
		return strconv.FormatUint(r.Nth, 10), r.Nth != 0
	case "verb":
		return r.Verb, r.Verb != ""
	case "errno":
		return unix.ErrnoName(r.Errno), r.Errno != 0
	case "count":
		return strconv.FormatUint(r.Count, 10), r.Count != 0
	case "ip":
		return r.IP.String(), r.IP.IsValid()
	case "at":
		return r.At.String(), r.At != 0
	case "by":
		return r.By.String(), r.By != 0
	case "after":
		return strconv.FormatUint(r.After, 10), r.After != 0
	}
	return "", false
}
