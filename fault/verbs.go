package fault

import "strings"

// verbNames are the uverbs write commands (ib_user_verbs.h, lower case,
// without IB_USER_VERBS_[EX_]CMD_) a verbs rule may name.
var verbNames = []string{
	"get_context", "query_device", "query_port", "alloc_pd", "dealloc_pd", "create_ah", "modify_ah",
	"query_ah", "destroy_ah", "reg_mr", "reg_smr", "rereg_mr", "query_mr", "dereg_mr", "alloc_mw",
	"bind_mw", "dealloc_mw", "create_comp_channel", "create_cq", "resize_cq", "destroy_cq", "poll_cq",
	"peek_cq", "req_notify_cq", "create_qp", "query_qp", "modify_qp", "destroy_qp", "post_send",
	"post_recv", "attach_mcast", "detach_mcast", "create_srq", "modify_srq", "query_srq", "destroy_srq",
	"post_srq_recv", "open_xrcd", "close_xrcd", "open_qp", "create_flow", "destroy_flow", "create_wq",
	"modify_wq", "destroy_wq", "create_rwq_ind_tbl", "destroy_rwq_ind_tbl", "modify_cq",
}

// KnownVerb reports whether name is a uverbs command a verbs rule may name.
func KnownVerb(name string) bool { return contains(verbNames, name) }

// VerbOf returns the rule name of a uverbs command name as
// uverbs.CommandName gives it ("IB_USER_VERBS_EX_CMD_CREATE_QP" →
// "create_qp"), "" for another string.
func VerbOf(command string) string {
	for _, p := range []string{"IB_USER_VERBS_EX_CMD_", "IB_USER_VERBS_CMD_"} {
		if rest, ok := strings.CutPrefix(command, p); ok {
			return strings.ToLower(rest)
		}
	}
	return ""
}
