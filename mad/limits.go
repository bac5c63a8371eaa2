package mad

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// PrivateDataSize returns the private-data area of CM message a in bytes
// (IB_CM_*_PRIVATE_DATA_SIZE), 0 for an attribute without one.
func PrivateDataSize(a AttrID) int {
	switch a {
	case AttrREQ:
		return REQPrivateDataSize
	case AttrMRA:
		return MRAPrivateDataSize
	case AttrREJ:
		return REJPrivateDataSize
	case AttrREP:
		return REPPrivateDataSize
	case AttrRTU:
		return RTUPrivateDataSize
	case AttrDREQ:
		return DREQPrivateDataSize
	case AttrDREP:
		return DREPPrivateDataSize
	case AttrSIDRREQ:
		return SIDRREQPrivateDataSize
	case AttrSIDRREP:
		return SIDRREPPrivateDataSize
	}
	return 0
}

// MaxUserPrivateData returns how many bytes of private data a consumer may
// pass with message a. With ipHeader (an rdma_cm id bound to an IP
// address, whose REQ and SIDR_REQ start with the CMAHeaderSize-byte
// rdma_cm header: cma_user_data_offset) a REQ leaves 56 bytes and a
// SIDR_REQ 180; every other message gives the consumer its whole area.
func MaxUserPrivateData(a AttrID, ipHeader bool) int {
	n := PrivateDataSize(a)
	if ipHeader && (a == AttrREQ || a == AttrSIDRREQ) {
		n -= CMAHeaderSize
	}
	return n
}

// CheckPrivateData fails with EINVAL when n bytes of consumer private
// data do not fit message a, as the kernel's ib_send_cm_req, _rep, _rtu,
// _dreq, _drep, _rej, _mra and _sidr_req/_sidr_rep refuse them (rdma_cm
// adds its header first for REQ and SIDR_REQ: see MaxUserPrivateData).
// A negative n is EINVAL too.
func CheckPrivateData(a AttrID, n int, ipHeader bool) error {
	if m := MaxUserPrivateData(a, ipHeader); n < 0 || n > m {
		return fmt.Errorf("mad: %d bytes of private data for %v, at most %d: %w", n, a, m, unix.EINVAL)
	}
	return nil
}

// Check reports whether the kernel's ib_send_cm_rej would send f:
// additional reject information beyond REJARISize bytes or private data
// beyond REJPrivateDataSize is EINVAL, as is a Reject Info Length that
// is not the ARI's length.
func (f *REJFields) Check() error {
	if len(f.ARI) > REJARISize {
		return fmt.Errorf("mad: REJ ARI of %d bytes, at most %d: %w", len(f.ARI), REJARISize, unix.EINVAL)
	}
	if f.RejectInfoLength != 0 && int(f.RejectInfoLength) != len(f.ARI) {
		return fmt.Errorf("mad: REJ info length %d for %d bytes of ARI: %w", f.RejectInfoLength, len(f.ARI), unix.EINVAL)
	}
	if len(f.PrivateData) > REJPrivateDataSize {
		return fmt.Errorf("mad: REJ private data of %d bytes, at most %d: %w", len(f.PrivateData), REJPrivateDataSize, unix.EINVAL)
	}
	return nil
}

// ARI returns the Additional Reject Information the REJ declares: the
// first RejectInfoLength bytes of the ARI area (at most REJARISize).
func (r REJ) ARI() []byte { return r[36 : 36+min(int(r[33]>>1), REJARISize)] }
