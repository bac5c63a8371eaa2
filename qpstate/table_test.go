package qpstate

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/softroce/softroce/internal/testenv"
	"golang.org/x/sys/unix"
)

// kernelRows is an independent transcription of qp_state_table from
// drivers/infiniband/core/verbs.c (Linux 6.12 / mainline), written as one
// line per (cur, next, type) that has a non-empty entry, plus one line per
// valid pair ("CUR NEXT valid"). Attribute names are the kernel's with the
// IB_QP_ prefix dropped; the values come from kernelBits below, not from
// the package's constants.
const kernelRows = `
RESET RESET valid
RESET INIT  valid
RESET INIT  UD         req PKEY_INDEX PORT QKEY
RESET INIT  RAW_PACKET req PORT
RESET INIT  UC         req PKEY_INDEX PORT ACCESS_FLAGS
RESET INIT  RC         req PKEY_INDEX PORT ACCESS_FLAGS
RESET INIT  XRC_INI    req PKEY_INDEX PORT ACCESS_FLAGS
RESET INIT  XRC_TGT    req PKEY_INDEX PORT ACCESS_FLAGS
RESET INIT  SMI        req PKEY_INDEX QKEY
RESET INIT  GSI        req PKEY_INDEX QKEY

INIT RESET valid
INIT ERR   valid
INIT INIT  valid
INIT INIT  UD      opt PKEY_INDEX PORT QKEY
INIT INIT  UC      opt PKEY_INDEX PORT ACCESS_FLAGS
INIT INIT  RC      opt PKEY_INDEX PORT ACCESS_FLAGS
INIT INIT  XRC_INI opt PKEY_INDEX PORT ACCESS_FLAGS
INIT INIT  XRC_TGT opt PKEY_INDEX PORT ACCESS_FLAGS
INIT INIT  SMI     opt PKEY_INDEX QKEY
INIT INIT  GSI     opt PKEY_INDEX QKEY
INIT RTR   valid
INIT RTR   UC      req AV PATH_MTU DEST_QPN RQ_PSN
INIT RTR   RC      req AV PATH_MTU DEST_QPN RQ_PSN MAX_DEST_RD_ATOMIC MIN_RNR_TIMER
INIT RTR   XRC_INI req AV PATH_MTU DEST_QPN RQ_PSN
INIT RTR   XRC_TGT req AV PATH_MTU DEST_QPN RQ_PSN MAX_DEST_RD_ATOMIC MIN_RNR_TIMER
INIT RTR   UD      opt PKEY_INDEX QKEY
INIT RTR   UC      opt ALT_PATH ACCESS_FLAGS PKEY_INDEX
INIT RTR   RC      opt ALT_PATH ACCESS_FLAGS PKEY_INDEX
INIT RTR   XRC_INI opt ALT_PATH ACCESS_FLAGS PKEY_INDEX
INIT RTR   XRC_TGT opt ALT_PATH ACCESS_FLAGS PKEY_INDEX
INIT RTR   SMI     opt PKEY_INDEX QKEY
INIT RTR   GSI     opt PKEY_INDEX QKEY

RTR RESET valid
RTR ERR   valid
RTR RTS   valid
RTR RTS   UD         req SQ_PSN
RTR RTS   UC         req SQ_PSN
RTR RTS   RC         req TIMEOUT RETRY_CNT RNR_RETRY SQ_PSN MAX_QP_RD_ATOMIC
RTR RTS   XRC_INI    req TIMEOUT RETRY_CNT RNR_RETRY SQ_PSN MAX_QP_RD_ATOMIC
RTR RTS   XRC_TGT    req TIMEOUT SQ_PSN
RTR RTS   SMI        req SQ_PSN
RTR RTS   GSI        req SQ_PSN
RTR RTS   UD         opt CUR_STATE QKEY
RTR RTS   UC         opt CUR_STATE ALT_PATH ACCESS_FLAGS PATH_MIG_STATE
RTR RTS   RC         opt CUR_STATE ALT_PATH ACCESS_FLAGS MIN_RNR_TIMER PATH_MIG_STATE
RTR RTS   XRC_INI    opt CUR_STATE ALT_PATH ACCESS_FLAGS PATH_MIG_STATE
RTR RTS   XRC_TGT    opt CUR_STATE ALT_PATH ACCESS_FLAGS MIN_RNR_TIMER PATH_MIG_STATE
RTR RTS   SMI        opt CUR_STATE QKEY
RTR RTS   GSI        opt CUR_STATE QKEY
RTR RTS   RAW_PACKET opt RATE_LIMIT

RTS RESET valid
RTS ERR   valid
RTS RTS   valid
RTS RTS   UD         opt CUR_STATE QKEY
RTS RTS   UC         opt CUR_STATE ACCESS_FLAGS ALT_PATH PATH_MIG_STATE
RTS RTS   RC         opt CUR_STATE ACCESS_FLAGS ALT_PATH PATH_MIG_STATE MIN_RNR_TIMER
RTS RTS   XRC_INI    opt CUR_STATE ACCESS_FLAGS ALT_PATH PATH_MIG_STATE
RTS RTS   XRC_TGT    opt CUR_STATE ACCESS_FLAGS ALT_PATH PATH_MIG_STATE MIN_RNR_TIMER
RTS RTS   SMI        opt CUR_STATE QKEY
RTS RTS   GSI        opt CUR_STATE QKEY
RTS RTS   RAW_PACKET opt RATE_LIMIT
RTS SQD   valid
RTS SQD   UD      opt EN_SQD_ASYNC_NOTIFY
RTS SQD   UC      opt EN_SQD_ASYNC_NOTIFY
RTS SQD   RC      opt EN_SQD_ASYNC_NOTIFY
RTS SQD   XRC_INI opt EN_SQD_ASYNC_NOTIFY
RTS SQD   XRC_TGT opt EN_SQD_ASYNC_NOTIFY
RTS SQD   SMI     opt EN_SQD_ASYNC_NOTIFY
RTS SQD   GSI     opt EN_SQD_ASYNC_NOTIFY

SQD RESET valid
SQD ERR   valid
SQD RTS   valid
SQD RTS   UD      opt CUR_STATE QKEY
SQD RTS   UC      opt CUR_STATE ALT_PATH ACCESS_FLAGS PATH_MIG_STATE
SQD RTS   RC      opt CUR_STATE ALT_PATH ACCESS_FLAGS MIN_RNR_TIMER PATH_MIG_STATE
SQD RTS   XRC_INI opt CUR_STATE ALT_PATH ACCESS_FLAGS PATH_MIG_STATE
SQD RTS   XRC_TGT opt CUR_STATE ALT_PATH ACCESS_FLAGS MIN_RNR_TIMER PATH_MIG_STATE
SQD RTS   SMI     opt CUR_STATE QKEY
SQD RTS   GSI     opt CUR_STATE QKEY
SQD SQD   valid
SQD SQD   UD      opt PKEY_INDEX QKEY
SQD SQD   UC      opt AV ALT_PATH ACCESS_FLAGS PKEY_INDEX PATH_MIG_STATE
SQD SQD   RC      opt PORT AV TIMEOUT RETRY_CNT RNR_RETRY MAX_QP_RD_ATOMIC MAX_DEST_RD_ATOMIC ALT_PATH ACCESS_FLAGS PKEY_INDEX MIN_RNR_TIMER PATH_MIG_STATE
SQD SQD   XRC_INI opt PORT AV TIMEOUT RETRY_CNT RNR_RETRY MAX_QP_RD_ATOMIC ALT_PATH ACCESS_FLAGS PKEY_INDEX PATH_MIG_STATE
SQD SQD   XRC_TGT opt PORT AV TIMEOUT MAX_DEST_RD_ATOMIC ALT_PATH ACCESS_FLAGS PKEY_INDEX MIN_RNR_TIMER PATH_MIG_STATE
SQD SQD   SMI     opt PKEY_INDEX QKEY
SQD SQD   GSI     opt PKEY_INDEX QKEY

SQE RESET valid
SQE ERR   valid
SQE RTS   valid
SQE RTS   UD  opt CUR_STATE QKEY
SQE RTS   UC  opt CUR_STATE ACCESS_FLAGS
SQE RTS   SMI opt CUR_STATE QKEY
SQE RTS   GSI opt CUR_STATE QKEY

ERR RESET valid
ERR ERR   valid
`

// kernelBits are the values of enum ib_qp_attr_mask, written out literally.
var kernelBits = map[string]uint32{
	"STATE": 0x1, "CUR_STATE": 0x2, "EN_SQD_ASYNC_NOTIFY": 0x4, "ACCESS_FLAGS": 0x8,
	"PKEY_INDEX": 0x10, "PORT": 0x20, "QKEY": 0x40, "AV": 0x80, "PATH_MTU": 0x100,
	"TIMEOUT": 0x200, "RETRY_CNT": 0x400, "RNR_RETRY": 0x800, "RQ_PSN": 0x1000,
	"MAX_QP_RD_ATOMIC": 0x2000, "ALT_PATH": 0x4000, "MIN_RNR_TIMER": 0x8000,
	"SQ_PSN": 0x10000, "MAX_DEST_RD_ATOMIC": 0x20000, "PATH_MIG_STATE": 0x40000,
	"CAP": 0x80000, "DEST_QPN": 0x100000, "RATE_LIMIT": 0x2000000,
}

var (
	kernelStates = map[string]int{"RESET": 0, "INIT": 1, "RTR": 2, "RTS": 3, "SQD": 4, "SQE": 5, "ERR": 6}
	kernelTypes  = map[string]int{"SMI": 0, "GSI": 1, "RC": 2, "UC": 3, "UD": 4, "RAW_IPV6": 5,
		"RAW_ETHERTYPE": 6, "RAW_PACKET": 8, "XRC_INI": 9, "XRC_TGT": 10}
)

// refTable is kernelRows parsed: valid pairs and req/opt per type, keyed by
// "cur next type" integers.
type refTable struct {
	valid    map[[2]int]bool
	req, opt map[[3]int]uint32
}

func loadRef(t testing.TB) *refTable {
	t.Helper()
	r := &refTable{valid: map[[2]int]bool{}, req: map[[3]int]uint32{}, opt: map[[3]int]uint32{}}
	for n, line := range strings.Split(kernelRows, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		c, ok1 := kernelStates[f[0]]
		x, ok2 := kernelStates[f[1]]
		if !ok1 || !ok2 || len(f) < 3 {
			t.Fatalf("kernelRows line %d: bad %q", n, line)
		}
		if f[2] == "valid" {
			r.valid[[2]int{c, x}] = true
			continue
		}
		ty, ok := kernelTypes[f[2]]
		if !ok || len(f) < 5 || (f[3] != "req" && f[3] != "opt") {
			t.Fatalf("kernelRows line %d: bad %q", n, line)
		}
		var m uint32
		for _, name := range f[4:] {
			v, ok := kernelBits[name]
			if !ok {
				t.Fatalf("kernelRows line %d: unknown bit %q", n, name)
			}
			m |= v
		}
		k := [3]int{c, x, ty}
		if f[3] == "req" {
			r.req[k] = m
		} else {
			r.opt[k] = m
		}
	}
	return r
}

// isOK is the reference validator over the transcription, written from the
// kernel's algorithm independently of ModifyIsOK.
func (r *refTable) isOK(c, x, ty int, mask uint32) bool {
	if c < 0 || c > 6 || x < 0 || x > 6 || ty < 0 || ty > 10 {
		return false
	}
	if mask&0x2 != 0 && c != 2 && c != 3 && c != 4 && c != 5 {
		return false
	}
	if !r.valid[[2]int{c, x}] {
		return false
	}
	req, opt := r.req[[3]int{c, x, ty}], r.opt[[3]int{c, x, ty}]
	return mask&req == req && mask&^(req|opt|0x1) == 0
}

func TestTableMatchesKernelTranscription(t *testing.T) {
	ref := loadRef(t)
	if n := len(ref.valid); n != 22 {
		t.Fatalf("transcription has %d valid pairs, want 22", n)
	}
	for c := State(-1); c <= NumStates; c++ {
		for x := State(-1); x <= NumStates; x++ {
			for ty := Type(-1); ty <= NumTypes; ty++ {
				req, opt, valid := Masks(c, x, ty)
				inRange := c >= 0 && c < 7 && x >= 0 && x < 7 && ty >= 0 && ty < 11
				wantValid := inRange && ref.valid[[2]int{int(c), int(x)}]
				if valid != wantValid {
					t.Errorf("Masks(%v, %v, %v) valid = %v, want %v", c, x, ty, valid, wantValid)
				}
				if !inRange {
					continue
				}
				k := [3]int{int(c), int(x), int(ty)}
				if uint32(req) != ref.req[k] || uint32(opt) != ref.opt[k] {
					t.Errorf("Masks(%v, %v, %v) = req %v opt %v, want req %v opt %v",
						c, x, ty, req, opt, AttrMask(ref.req[k]), AttrMask(ref.opt[k]))
				}
			}
		}
	}
}

// TestModifyIsOKExhaustive generates, for every (cur, next, type), the masks
// {required only, + each optional bit, - each required bit, + each
// forbidden bit} (each with and without STATE) and checks ModifyIsOK and
// Check against the reference.
func TestModifyIsOKExhaustive(t *testing.T) {
	ref := loadRef(t)
	const all = uint32(1<<26 - 1)
	n := 0
	for c := 0; c < 7; c++ {
		for x := 0; x < 7; x++ {
			for ty := 0; ty < 11; ty++ {
				k := [3]int{c, x, ty}
				req, opt := ref.req[k], ref.opt[k]
				type gen struct {
					name string
					mask uint32
				}
				gens := []gen{{"required", req}}
				for b := uint32(1); b != 0 && b <= all; b <<= 1 {
					switch {
					case opt&b != 0:
						gens = append(gens, gen{fmt.Sprintf("+opt_%#x", b), req | b})
					case req&b != 0:
						gens = append(gens, gen{fmt.Sprintf("-req_%#x", b), req &^ b})
					case b != 0x1:
						gens = append(gens, gen{fmt.Sprintf("+forbidden_%#x", b), req | b})
					}
				}
				gens = append(gens, gen{"required+all_optional", req | opt}, gen{"unknown_bit31", req | 1<<31})
				for _, g := range gens {
					for _, withState := range []uint32{0, 0x1} {
						mask := g.mask | withState
						want := ref.isOK(c, x, ty, mask)
						got := ModifyIsOK(State(c), State(x), Type(ty), AttrMask(mask))
						n++
						if got != want {
							t.Errorf("%s->%s type %d %s mask %#x: ModifyIsOK = %v, want %v",
								State(c).Name(), State(x).Name(), ty, g.name, mask, got, want)
						}
						err := Check(State(c), State(x), Type(ty), AttrMask(mask))
						if (err == nil) != want {
							t.Errorf("%s->%s type %d %s mask %#x: Check = %v, want ok=%v",
								State(c).Name(), State(x).Name(), ty, g.name, mask, err, want)
						}
					}
				}
			}
		}
	}
	t.Logf("%d generated cases", n)
}

// TestModifyIsOKRandomMasks draws random masks for all 7x7x11 triples (and a
// few out-of-range ones), biased towards the pair's own bits so that
// passing masks occur too.
func TestModifyIsOKRandomMasks(t *testing.T) {
	ref := loadRef(t)
	rng := testenv.Rand(t)
	for c := -1; c <= 7; c++ {
		for x := -1; x <= 7; x++ {
			for ty := -1; ty <= 11; ty++ {
				k := [3]int{c, x, ty}
				for i := 0; i < 200; i++ {
					var mask uint32
					switch i % 3 {
					case 0:
						mask = rng.Uint32()
					case 1:
						mask = rng.Uint32() & (1<<21 - 1)
					default:
						mask = ref.req[k] | (rng.Uint32() & ref.opt[k]) | (rng.Uint32() & 1)
						if rng.IntN(4) == 0 {
							mask ^= 1 << rng.IntN(26)
						}
					}
					want := ref.isOK(c, x, ty, mask)
					if got := ModifyIsOK(State(c), State(x), Type(ty), AttrMask(mask)); got != want {
						t.Fatalf("ModifyIsOK(%d, %d, %d, %#x) = %v, want %v", c, x, ty, mask, got, want)
					}
				}
			}
		}
	}
}

// checkConsistent verifies that Check agrees with ModifyIsOK and that a
// mask error's Missing/Forbidden are exactly the bits to add and remove.
func checkConsistent(t testing.TB, c, x State, ty Type, mask AttrMask) {
	err := Check(c, x, ty, mask)
	ok := ModifyIsOK(c, x, ty, mask)
	if (err == nil) != ok {
		t.Fatalf("Check(%v, %v, %v, %v) = %v but ModifyIsOK = %v", c, x, ty, mask, err, ok)
	}
	if err == nil {
		return
	}
	var te *TransitionError
	if !errors.As(err, &te) || !errors.Is(err, unix.EINVAL) {
		t.Fatalf("Check(%v, %v, %v, %v) = %#v, want *TransitionError wrapping EINVAL", c, x, ty, mask, err)
	}
	if te.Cur != c || te.Next != x || te.Type != ty || te.Mask != mask || !te.Reason.IsValid() {
		t.Fatalf("Check(%v, %v, %v, %v): error fields %+v", c, x, ty, mask, te)
	}
	if te.Reason == ReasonMask {
		if te.Missing == 0 && te.Forbidden == 0 {
			t.Fatalf("mask error with nothing missing or forbidden: %+v", te)
		}
		if te.Missing&mask != 0 || te.Forbidden&^mask != 0 {
			t.Fatalf("Missing %v must be outside and Forbidden %v inside mask %v", te.Missing, te.Forbidden, mask)
		}
		// Applying the fix must pass.
		if fixed := (mask | te.Missing) &^ te.Forbidden; !ModifyIsOK(c, x, ty, fixed) {
			t.Fatalf("fix of %v -> %v still refused for %v->%v %v", mask, fixed, c, x, ty)
		}
	}
}

func FuzzModifyIsOKCheck(f *testing.F) {
	f.Add(int32(2), int32(3), int32(2), uint32(0x12E01))
	f.Add(int32(0), int32(1), int32(4), uint32(0x71))
	f.Add(int32(1), int32(1), int32(2), uint32(0x3))
	f.Add(int32(5), int32(3), int32(2), uint32(0x3))
	f.Add(int32(9), int32(-1), int32(11), uint32(0xffffffff))
	f.Fuzz(func(t *testing.T, c, x, ty int32, mask uint32) {
		checkConsistent(t, State(c), State(x), Type(ty), AttrMask(mask))
		if len((&TransitionError{Cur: State(c), Next: State(x), Type: Type(ty), Reason: ReasonMask}).Error()) == 0 {
			t.Fatal("empty message")
		}
	})
}

func TestCheckConsistentExhaustiveSingleBits(t *testing.T) {
	for c := State(-1); c <= NumStates; c++ {
		for x := State(-1); x <= NumStates; x++ {
			for ty := Type(-1); ty <= NumTypes; ty++ {
				req, opt, _ := Masks(c, x, ty)
				for b := 0; b < 32; b++ {
					checkConsistent(t, c, x, ty, req|AttrMask(1)<<b)
					checkConsistent(t, c, x, ty, (req|opt)&^(AttrMask(1)<<b))
				}
			}
		}
	}
}

func TestCheckMessages(t *testing.T) {
	tests := []struct {
		name        string
		cur, next   State
		typ         Type
		mask        AttrMask
		want        string
		wantMissing AttrMask
		wantForbid  AttrMask
		wantReason  Reason
	}{
		{"missing_and_forbidden", StateRTR, StateRTS, TypeRC,
			AttrState | AttrSQPSN | AttrRNRRetry | AttrMaxQPRdAtomic | AttrPort,
			"modify QP: RTR->RTS (RC): missing IB_QP_TIMEOUT|IB_QP_RETRY_CNT; not allowed IB_QP_PORT: invalid argument",
			AttrTimeout | AttrRetryCnt, AttrPort, ReasonMask},
		{"missing_only", StateReset, StateInit, TypeRC, AttrState | AttrPKeyIndex | AttrPort,
			"modify QP: RESET->INIT (RC): missing IB_QP_ACCESS_FLAGS: invalid argument",
			AttrAccessFlags, 0, ReasonMask},
		{"forbidden_only", StateReset, StateInit, TypeUD, 0x79,
			"modify QP: RESET->INIT (UD): not allowed IB_QP_ACCESS_FLAGS: invalid argument",
			0, AttrAccessFlags, ReasonMask},
		{"pair", StateReset, StateRTR, TypeRC, AttrState,
			"modify QP: RESET->RTR (RC): transition not allowed: invalid argument", 0, 0, ReasonPair},
		{"cur_from_init", StateInit, StateInit, TypeRC, AttrState | AttrCurState,
			"modify QP: INIT->INIT (RC): IB_QP_CUR_STATE may only be given from RTR, RTS, SQD or SQE: invalid argument",
			0, AttrCurState, ReasonCurState},
		{"state_out_of_range", 7, StateRTS, TypeRC, AttrState,
			"modify QP: 7->RTS (RC): state out of range (RESET..ERR): invalid argument", 0, 0, ReasonOutOfRange},
		{"type_out_of_range", StateReset, StateInit, 11, AttrState,
			"modify QP: RESET->INIT (11): unknown QP type: invalid argument", 0, 0, ReasonOutOfRange},
		{"unknown_bit", StateRTS, StateRTS, TypeRC, AttrState | 1<<30,
			"modify QP: RTS->RTS (RC): not allowed 0x40000000: invalid argument", 0, 1 << 30, ReasonMask},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(tt.cur, tt.next, tt.typ, tt.mask)
			if err == nil {
				t.Fatal("Check = nil, want an error")
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("message\n got %q\nwant %q", got, tt.want)
			}
			var te *TransitionError
			if !errors.As(err, &te) {
				t.Fatalf("%T is not *TransitionError", err)
			}
			if te.Missing != tt.wantMissing || te.Forbidden != tt.wantForbid || te.Reason != tt.wantReason {
				t.Errorf("got missing %v forbidden %v reason %v, want %v %v %v",
					te.Missing, te.Forbidden, te.Reason, tt.wantMissing, tt.wantForbid, tt.wantReason)
			}
			if !errors.Is(err, unix.EINVAL) {
				t.Error("errors.Is(err, EINVAL) = false")
			}
		})
	}
}
