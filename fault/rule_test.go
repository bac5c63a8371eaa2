package fault

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestParseAcceptsTheDocumentedRules: every example rule parses into the
// fields it says, and its canonical form reads back to the same rule.
func TestParseAcceptsTheDocumentedRules(t *testing.T) {
	for _, tc := range []struct {
		in, canon string
		check     func(*Rule) bool
	}{
		{"wire:drop,qp=0x11,opcode=RDMA_WRITE_FIRST,nth=3", "wire:drop,qp=0x11,opcode=RDMA_WRITE_FIRST,nth=3",
			func(r *Rule) bool { return r.Kind == KindWire && r.HasQP && r.QP == 0x11 && r.Nth == 3 }},
		{"wire:corrupt,prob=0.05", "wire:corrupt,prob=0.05", func(r *Rule) bool { return r.Prob == 0.05 }},
		{"wire:duplicate,count=10,psn=100-200", "wire:duplicate,psn=100-200,count=10",
			func(r *Rule) bool { return r.PSNLo == 100 && r.PSNHi == 200 && r.Count == 10 }},
		{"wire:reorder,opcode=send_only", "wire:reorder,opcode=SEND_ONLY", func(r *Rule) bool { return r.Opcode == "SEND_ONLY" }},
		{"wire:delay,qp=18", "wire:delay,qp=0x12", func(r *Rule) bool { return r.QP == 18 }},
		{"wire:drop,opcode=RC_ACKNOWLEDGE,psn=7", "wire:drop,opcode=RC_ACKNOWLEDGE,psn=7", func(r *Rule) bool { return r.PSNHi == 7 }},
		{"qp:silent,qp=0x11", "qp:silent,qp=0x11", func(r *Rule) bool { return r.Kind == KindQP }},
		{"qp:err,at=1s,qp=0x11", "qp:err,qp=0x11,at=1s", func(r *Rule) bool { return r.At == time.Second }},
		{"qp:err,after=10,qp=0x11", "qp:err,qp=0x11,after=10", func(r *Rule) bool { return r.After == 10 }},
		{"qp:rnr,qp=17,count=3", "qp:rnr,qp=0x11,count=3", func(r *Rule) bool { return r.Count == 3 }},
		{"qp:invalidate,rkey=4660", "qp:invalidate,rkey=0x1234", func(r *Rule) bool { return r.HasRKey && r.RKey == 0x1234 }},
		{"verbs:fail,verb=create_qp,errno=ENOMEM", "verbs:fail,verb=create_qp,errno=ENOMEM",
			func(r *Rule) bool { return r.Verb == "create_qp" && r.Errno == unix.ENOMEM }},
		{"verbs:fail,errno=eagain,verb=POST_SEND,count=3", "verbs:fail,verb=post_send,errno=EAGAIN,count=3",
			func(r *Rule) bool { return r.Count == 3 && r.Errno == unix.EAGAIN }},
		{"cq:overflow,qp=0x11", "cq:overflow,qp=0x11", func(r *Rule) bool { return r.Kind == KindCQ }},
		{"cq:delay,count=4,by=50ms,qp=0x11", "cq:delay,qp=0x11,by=50ms,count=4", func(r *Rule) bool { return r.By == 50*time.Millisecond }},
		{"port:down", "port:down", func(r *Rule) bool { return r.Kind == KindPort && r.Action == "down" }},
		{"port:up,at=2s", "port:up,at=2s", func(r *Rule) bool { return r.At == 2*time.Second }},
		{"port:gid,ip=10.0.0.9/24", "port:gid,ip=10.0.0.9/24", func(r *Rule) bool { return r.IP.Bits() == 24 }},
		{"port:gid,ip=fd00::9", "port:gid,ip=fd00::9/128", func(r *Rule) bool { return r.IP.Addr().Is6() }},
	} {
		t.Run(tc.in, func(t *testing.T) {
			r, err := Parse(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(r) {
				t.Errorf("fields %+v", r)
			}
			if got := r.String(); got != tc.canon {
				t.Errorf("String() = %q, want %q", got, tc.canon)
			}
			r2, err := Parse(r.String())
			if err != nil || *r2 != *r {
				t.Errorf("round trip: %+v %v, want %+v", r2, err, r)
			}
		})
	}
}

// TestParseRefusesBadRulesClearly: each malformed rule is an error that
// names what is wrong.
func TestParseRefusesBadRulesClearly(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "want KIND:ACTION"},
		{"drop", "want KIND:ACTION"},
		{"link:drop", `unknown kind "link"`},
		{"wire:lose", `unknown action "lose" for wire (drop, duplicate, reorder, corrupt, delay)`},
		{"wire:drop,qp", `option "qp": want KEY=VALUE`},
		{"wire:drop,qp=", `option "qp=": want KEY=VALUE`},
		{"wire:drop,qp=0x1000000", "a QP number is 24 bits"},
		{"wire:drop,qp=1,qp=2", `"qp" given twice`},
		{"wire:drop,verb=create_qp", `wire:drop takes no "verb"`},
		{"wire:drop,opcode=WRITE", "not an opcode"},
		{"wire:drop,psn=9-3", "ends before it starts"},
		{"wire:drop,prob=0", "a probability in (0, 1]"},
		{"wire:drop,prob=1.5", "a probability in (0, 1]"},
		{"wire:drop,prob=NaN", "a probability in (0, 1]"},
		{"wire:drop,nth=0", "counts from 1"},
		{"wire:drop,count=0", "at least 1"},
		{"wire:drop,prob=0.5,nth=2", "prob and nth exclude each other"},
		{"qp:silent", "qp:silent needs qp=QPN"},
		{"cq:overflow", "cq:overflow needs qp=QPN"},
		{"qp:err,qp=0x11,at=1s,after=2", "at and after exclude each other"},
		{"qp:err,qp=0x11,after=0", "at least 1 (work requests completed)"},
		{"cq:delay,qp=0x11", "cq:delay needs by=DURATION"},
		{"cq:delay,qp=0x11,by=0s", "a duration from 1ns to 1h"},
		{"cq:overflow,qp=0x11,by=1s", `cq:overflow takes no "by"`},
		{"qp:err,at=1s", "qp:err needs qp=QPN"},
		{"qp:invalidate,qp=0x11", "qp:invalidate needs rkey=KEY"},
		{"qp:invalidate,rkey=0x100000000", "an R_Key is 32 bits"},
		{"qp:rnr,qp=0x11,at=1s", `qp:rnr takes no "at"`},
		{"verbs:fail,verb=create_qp", "needs verb=NAME and errno=ENAME"},
		{"verbs:fail,verb=frobnicate,errno=ENOMEM", "not a uverbs command"},
		{"verbs:fail,verb=create_qp,errno=ENOPE", "not an errno name"},
		{"port:gid", "port:gid needs ip="},
		{"port:gid,ip=10.0.0.300", "an IP address"},
		{"port:up,at=-1s", "a duration"},
		{"port:down,at=soon", "a duration"},
		{strings.Repeat("x", 2000), "longer than 1024 bytes"},
	} {
		_, err := Parse(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "fault: rule ") {
			t.Errorf("Parse(%.40q) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
}

// FuzzParse: Parse never panics; what it accepts has a canonical form that
// parses back to the same rule and prints the same.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"wire:drop,qp=0x11,opcode=RDMA_WRITE_FIRST,nth=3", "wire:corrupt,prob=0.05",
		"wire:duplicate,psn=100-200,count=10", "qp:silent,qp=0x11", "verbs:fail,verb=create_qp,errno=ENOMEM",
		"port:up,at=2s", "port:gid,ip=10.0.0.9/24", "qp:invalidate,rkey=0x1234,count=2", "qp:err,qp=1,at=1ms", "cq:delay,qp=0x11,by=1ms", "port:gid,ip=::ffff:1.2.3.4", "wire:drop,prob=1e-300"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(s)
		if err != nil {
			return
		}
		c := r.String()
		r2, err := Parse(c)
		if err != nil {
			t.Fatalf("canonical %q of %q does not parse: %v", c, s, err)
		}
		if *r2 != *r || r2.String() != c {
			t.Fatalf("%q: %+v, canonical %q reads back as %+v", s, r, c, r2)
		}
	})
}
