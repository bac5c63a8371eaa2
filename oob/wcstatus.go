package oob

// ibvWCStatusStrs are libibverbs' texts for enum ibv_wc_status, indexed by
// the status (rdma-core libibverbs/verbs.c, ibv_wc_status_str; the values
// are the kernel's ib_wc_status ones, IBV_WC_TM_ERR and
// IBV_WC_TM_RNDV_INCOMPLETE added after IBV_WC_GENERAL_ERR). They differ
// from the kernel's ib_wc_status_msg (emu.WCStatus.Msg): "Work Request
// Flushed Error" against "WR flushed", "aborted error" against "operation
// aborted", "memory management operation error" against "memory bind
// operation error".
var ibvWCStatusStrs = [...]string{
	"success",                           // IBV_WC_SUCCESS
	"local length error",                // IBV_WC_LOC_LEN_ERR
	"local QP operation error",          // IBV_WC_LOC_QP_OP_ERR
	"local EE context operation error",  // IBV_WC_LOC_EEC_OP_ERR
	"local protection error",            // IBV_WC_LOC_PROT_ERR
	"Work Request Flushed Error",        // IBV_WC_WR_FLUSH_ERR
	"memory management operation error", // IBV_WC_MW_BIND_ERR
	"bad response error",                // IBV_WC_BAD_RESP_ERR
	"local access error",                // IBV_WC_LOC_ACCESS_ERR
	"remote invalid request error",      // IBV_WC_REM_INV_REQ_ERR
	"remote access error",               // IBV_WC_REM_ACCESS_ERR
	"remote operation error",            // IBV_WC_REM_OP_ERR
	"transport retry counter exceeded",  // IBV_WC_RETRY_EXC_ERR
	"RNR retry counter exceeded",        // IBV_WC_RNR_RETRY_EXC_ERR
	"local RDD violation error",         // IBV_WC_LOC_RDD_VIOL_ERR
	"remote invalid RD request",         // IBV_WC_REM_INV_RD_REQ_ERR
	"aborted error",                     // IBV_WC_REM_ABORT_ERR
	"invalid EE context number",         // IBV_WC_INV_EECN_ERR
	"invalid EE context state",          // IBV_WC_INV_EEC_STATE_ERR
	"fatal error",                       // IBV_WC_FATAL_ERR
	"response timeout error",            // IBV_WC_RESP_TIMEOUT_ERR
	"general error",                     // IBV_WC_GENERAL_ERR
	"TM error",                          // IBV_WC_TM_ERR
	"TM software rendezvous",            // IBV_WC_TM_RNDV_INCOMPLETE
}

// WCStatusStr is ibv_wc_status_str: the text the user-space tools print
// for a work completion status ("Work Request Flushed Error" for 5), and
// "unknown" for a value outside the enum.
func WCStatusStr(status int) string {
	if status < 0 || status >= len(ibvWCStatusStrs) {
		return "unknown"
	}
	return ibvWCStatusStrs[status]
}
