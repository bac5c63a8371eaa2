//go:build ignore

// Input to cgo -godefs: the structures of the uverbs write ABI
// (<rdma/ib_user_verbs.h>) and of rxe's queue ABI (<rdma/rdma_user_rxe.h>)
// as the installed kernel headers lay them out. Run "go generate" in this
// directory to rewrite ztypes_linux.go; layout_test.go checks every size and
// offset of the result against the C compiler.

package uverbs

/*
#include <rdma/ib_user_verbs.h>
#include <rdma/rdma_user_rxe.h>
#include <rdma/rdma_user_cm.h>
#include <rdma/rdma_user_ioctl_cmds.h>
#include <rdma/ib_user_ioctl_cmds.h>
#include <rdma/ib_user_ioctl_verbs.h>

// Members of unions, named so that cgo can lay them out.
typedef typeof(((struct rxe_send_wr *)0)->wr.rdma) rxe_send_wr_rdma;
typedef typeof(((struct rxe_send_wr *)0)->wr.atomic) rxe_send_wr_atomic;
typedef typeof(((struct rxe_send_wr *)0)->wr.ud) rxe_send_wr_ud;
typedef typeof(((struct rxe_send_wr *)0)->wr.mw) rxe_send_wr_mw;
typedef typeof(((struct ib_uverbs_odp_caps *)0)->per_transport_caps) ib_uverbs_odp_per_transport_caps;
*/
import "C"

// The command headers.
type (
	CmdHdr   C.struct_ib_uverbs_cmd_hdr
	ExCmdHdr C.struct_ib_uverbs_ex_cmd_hdr
)

// The ioctl ABI (<rdma/rdma_user_ioctl_cmds.h>): RDMA_VERBS_IOCTL's
// header and its attributes.
type (
	IoctlHdr  C.struct_ib_uverbs_ioctl_hdr
	IoctlAttr C.struct_ib_uverbs_attr
	QpCap     C.struct_ib_uverbs_qp_cap
	GidEntry  C.struct_ib_uverbs_gid_entry
)

// Events read from the async event fd and a completion channel.
type (
	AsyncEventDesc C.struct_ib_uverbs_async_event_desc
	CompEventDesc  C.struct_ib_uverbs_comp_event_desc
)

// Commands and responses.
type (
	GetContext            C.struct_ib_uverbs_get_context
	GetContextResp        C.struct_ib_uverbs_get_context_resp
	QueryDevice           C.struct_ib_uverbs_query_device
	QueryDeviceResp       C.struct_ib_uverbs_query_device_resp
	ExQueryDevice         C.struct_ib_uverbs_ex_query_device
	OdpPerTransportCaps   C.ib_uverbs_odp_per_transport_caps
	OdpCaps               C.struct_ib_uverbs_odp_caps
	RssCaps               C.struct_ib_uverbs_rss_caps
	TmCaps                C.struct_ib_uverbs_tm_caps
	CqModerationCaps      C.struct_ib_uverbs_cq_moderation_caps
	ExQueryDeviceResp     C.struct_ib_uverbs_ex_query_device_resp
	QueryPort             C.struct_ib_uverbs_query_port
	QueryPortResp         C.struct_ib_uverbs_query_port_resp
	QueryPortRespEx       C.struct_ib_uverbs_query_port_resp_ex
	AllocPd               C.struct_ib_uverbs_alloc_pd
	AllocPdResp           C.struct_ib_uverbs_alloc_pd_resp
	DeallocPd             C.struct_ib_uverbs_dealloc_pd
	RegMr                 C.struct_ib_uverbs_reg_mr
	RegMrResp             C.struct_ib_uverbs_reg_mr_resp
	DeregMr               C.struct_ib_uverbs_dereg_mr
	ReregMr               C.struct_ib_uverbs_rereg_mr
	ReregMrResp           C.struct_ib_uverbs_rereg_mr_resp
	AllocMw               C.struct_ib_uverbs_alloc_mw
	AllocMwResp           C.struct_ib_uverbs_alloc_mw_resp
	DeallocMw             C.struct_ib_uverbs_dealloc_mw
	CreateCompChannel     C.struct_ib_uverbs_create_comp_channel
	CreateCompChannelResp C.struct_ib_uverbs_create_comp_channel_resp
	CreateCq              C.struct_ib_uverbs_create_cq
	ExCreateCq            C.struct_ib_uverbs_ex_create_cq
	CreateCqResp          C.struct_ib_uverbs_create_cq_resp
	ExCreateCqResp        C.struct_ib_uverbs_ex_create_cq_resp
	ResizeCq              C.struct_ib_uverbs_resize_cq
	ResizeCqResp          C.struct_ib_uverbs_resize_cq_resp
	Wc                    C.struct_ib_uverbs_wc
	ReqNotifyCq           C.struct_ib_uverbs_req_notify_cq
	DestroyCq             C.struct_ib_uverbs_destroy_cq
	DestroyCqResp         C.struct_ib_uverbs_destroy_cq_resp
	GlobalRoute           C.struct_ib_uverbs_global_route
	AhAttr                C.struct_ib_uverbs_ah_attr
	CreateQp              C.struct_ib_uverbs_create_qp
	ExCreateQp            C.struct_ib_uverbs_ex_create_qp
	CreateQpResp          C.struct_ib_uverbs_create_qp_resp
	ExCreateQpResp        C.struct_ib_uverbs_ex_create_qp_resp
	QpDest                C.struct_ib_uverbs_qp_dest
	QueryQp               C.struct_ib_uverbs_query_qp
	QueryQpResp           C.struct_ib_uverbs_query_qp_resp
	ModifyQp              C.struct_ib_uverbs_modify_qp
	ExModifyQp            C.struct_ib_uverbs_ex_modify_qp
	ExModifyQpResp        C.struct_ib_uverbs_ex_modify_qp_resp
	DestroyQp             C.struct_ib_uverbs_destroy_qp
	DestroyQpResp         C.struct_ib_uverbs_destroy_qp_resp
	Sge                   C.struct_ib_uverbs_sge
	SendWr                C.struct_ib_uverbs_send_wr
	PostSend              C.struct_ib_uverbs_post_send
	PostSendResp          C.struct_ib_uverbs_post_send_resp
	RecvWr                C.struct_ib_uverbs_recv_wr
	PostRecv              C.struct_ib_uverbs_post_recv
	PostRecvResp          C.struct_ib_uverbs_post_recv_resp
	PostSrqRecv           C.struct_ib_uverbs_post_srq_recv
	PostSrqRecvResp       C.struct_ib_uverbs_post_srq_recv_resp
	CreateAh              C.struct_ib_uverbs_create_ah
	CreateAhResp          C.struct_ib_uverbs_create_ah_resp
	DestroyAh             C.struct_ib_uverbs_destroy_ah
	CreateSrq             C.struct_ib_uverbs_create_srq
	CreateXsrq            C.struct_ib_uverbs_create_xsrq
	CreateSrqResp         C.struct_ib_uverbs_create_srq_resp
	ModifySrq             C.struct_ib_uverbs_modify_srq
	QuerySrq              C.struct_ib_uverbs_query_srq
	QuerySrqResp          C.struct_ib_uverbs_query_srq_resp
	DestroySrq            C.struct_ib_uverbs_destroy_srq
	DestroySrqResp        C.struct_ib_uverbs_destroy_srq_resp
	AttachMcast           C.struct_ib_uverbs_attach_mcast
	DetachMcast           C.struct_ib_uverbs_detach_mcast
)

// rxe's queue ABI.
type (
	RxeGlobalRoute   C.struct_rxe_global_route
	RxeAv            C.struct_rxe_av
	RxeSendWr        C.struct_rxe_send_wr
	RxeSendWrRdma    C.rxe_send_wr_rdma
	RxeSendWrAtomic  C.rxe_send_wr_atomic
	RxeSendWrUd      C.rxe_send_wr_ud
	RxeSendWrMw      C.rxe_send_wr_mw
	RxeSge           C.struct_rxe_sge
	Mminfo           C.struct_mminfo
	RxeDmaInfo       C.struct_rxe_dma_info
	RxeSendWqe       C.struct_rxe_send_wqe
	RxeRecvWqe       C.struct_rxe_recv_wqe
	RxeCreateAhResp  C.struct_rxe_create_ah_resp
	RxeCreateCqResp  C.struct_rxe_create_cq_resp
	RxeResizeCqResp  C.struct_rxe_resize_cq_resp
	RxeCreateQpResp  C.struct_rxe_create_qp_resp
	RxeCreateSrqResp C.struct_rxe_create_srq_resp
	RxeModifySrqCmd  C.struct_rxe_modify_srq_cmd
	RxeQueueBuf      C.struct_rxe_queue_buf
)

// The rdma_ucm ABI of /dev/infiniband/rdma_cm (<rdma/rdma_user_cm.h>) and
// the structures it embeds.
type (
	In6Addr               C.struct_in6_addr
	SockaddrIn6           C.struct_sockaddr_in6
	KernelSockaddrStorage C.struct___kernel_sockaddr_storage
	UserPathRec           C.struct_ib_user_path_rec
	UcmCmdHdr             C.struct_rdma_ucm_cmd_hdr
	UcmCreateID           C.struct_rdma_ucm_create_id
	UcmCreateIDResp       C.struct_rdma_ucm_create_id_resp
	UcmDestroyID          C.struct_rdma_ucm_destroy_id
	UcmDestroyIDResp      C.struct_rdma_ucm_destroy_id_resp
	UcmBindIP             C.struct_rdma_ucm_bind_ip
	UcmBind               C.struct_rdma_ucm_bind
	UcmResolveIP          C.struct_rdma_ucm_resolve_ip
	UcmResolveAddr        C.struct_rdma_ucm_resolve_addr
	UcmResolveRoute       C.struct_rdma_ucm_resolve_route
	UcmQuery              C.struct_rdma_ucm_query
	UcmQueryRouteResp     C.struct_rdma_ucm_query_route_resp
	UcmQueryAddrResp      C.struct_rdma_ucm_query_addr_resp
	UcmQueryPathResp      C.struct_rdma_ucm_query_path_resp
	UcmConnParam          C.struct_rdma_ucm_conn_param
	UcmUDParam            C.struct_rdma_ucm_ud_param
	UcmECE                C.struct_rdma_ucm_ece
	UcmConnect            C.struct_rdma_ucm_connect
	UcmListen             C.struct_rdma_ucm_listen
	UcmAccept             C.struct_rdma_ucm_accept
	UcmReject             C.struct_rdma_ucm_reject
	UcmDisconnect         C.struct_rdma_ucm_disconnect
	UcmInitQPAttr         C.struct_rdma_ucm_init_qp_attr
	UcmNotify             C.struct_rdma_ucm_notify
	UcmJoinIPMcast        C.struct_rdma_ucm_join_ip_mcast
	UcmJoinMcast          C.struct_rdma_ucm_join_mcast
	UcmGetEvent           C.struct_rdma_ucm_get_event
	UcmEventResp          C.struct_rdma_ucm_event_resp
	UcmSetOption          C.struct_rdma_ucm_set_option
	UcmMigrateID          C.struct_rdma_ucm_migrate_id
	UcmMigrateResp        C.struct_rdma_ucm_migrate_resp
	QPAttr                C.struct_ib_uverbs_qp_attr
	PathRecData           C.struct_ib_path_rec_data
)

// Command numbers (enum ib_uverbs_write_cmds) and header flags.
const (
	CmdGetContext        = C.IB_USER_VERBS_CMD_GET_CONTEXT
	CmdQueryDevice       = C.IB_USER_VERBS_CMD_QUERY_DEVICE
	CmdQueryPort         = C.IB_USER_VERBS_CMD_QUERY_PORT
	CmdAllocPd           = C.IB_USER_VERBS_CMD_ALLOC_PD
	CmdDeallocPd         = C.IB_USER_VERBS_CMD_DEALLOC_PD
	CmdCreateAh          = C.IB_USER_VERBS_CMD_CREATE_AH
	CmdModifyAh          = C.IB_USER_VERBS_CMD_MODIFY_AH
	CmdQueryAh           = C.IB_USER_VERBS_CMD_QUERY_AH
	CmdDestroyAh         = C.IB_USER_VERBS_CMD_DESTROY_AH
	CmdRegMr             = C.IB_USER_VERBS_CMD_REG_MR
	CmdRegSmr            = C.IB_USER_VERBS_CMD_REG_SMR
	CmdReregMr           = C.IB_USER_VERBS_CMD_REREG_MR
	CmdQueryMr           = C.IB_USER_VERBS_CMD_QUERY_MR
	CmdDeregMr           = C.IB_USER_VERBS_CMD_DEREG_MR
	CmdAllocMw           = C.IB_USER_VERBS_CMD_ALLOC_MW
	CmdBindMw            = C.IB_USER_VERBS_CMD_BIND_MW
	CmdDeallocMw         = C.IB_USER_VERBS_CMD_DEALLOC_MW
	CmdCreateCompChannel = C.IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL
	CmdCreateCq          = C.IB_USER_VERBS_CMD_CREATE_CQ
	CmdResizeCq          = C.IB_USER_VERBS_CMD_RESIZE_CQ
	CmdDestroyCq         = C.IB_USER_VERBS_CMD_DESTROY_CQ
	CmdPollCq            = C.IB_USER_VERBS_CMD_POLL_CQ
	CmdPeekCq            = C.IB_USER_VERBS_CMD_PEEK_CQ
	CmdReqNotifyCq       = C.IB_USER_VERBS_CMD_REQ_NOTIFY_CQ
	CmdCreateQp          = C.IB_USER_VERBS_CMD_CREATE_QP
	CmdQueryQp           = C.IB_USER_VERBS_CMD_QUERY_QP
	CmdModifyQp          = C.IB_USER_VERBS_CMD_MODIFY_QP
	CmdDestroyQp         = C.IB_USER_VERBS_CMD_DESTROY_QP
	CmdPostSend          = C.IB_USER_VERBS_CMD_POST_SEND
	CmdPostRecv          = C.IB_USER_VERBS_CMD_POST_RECV
	CmdAttachMcast       = C.IB_USER_VERBS_CMD_ATTACH_MCAST
	CmdDetachMcast       = C.IB_USER_VERBS_CMD_DETACH_MCAST
	CmdCreateSrq         = C.IB_USER_VERBS_CMD_CREATE_SRQ
	CmdModifySrq         = C.IB_USER_VERBS_CMD_MODIFY_SRQ
	CmdQuerySrq          = C.IB_USER_VERBS_CMD_QUERY_SRQ
	CmdDestroySrq        = C.IB_USER_VERBS_CMD_DESTROY_SRQ
	CmdPostSrqRecv       = C.IB_USER_VERBS_CMD_POST_SRQ_RECV
	CmdOpenXrcd          = C.IB_USER_VERBS_CMD_OPEN_XRCD
	CmdCloseXrcd         = C.IB_USER_VERBS_CMD_CLOSE_XRCD
	CmdCreateXsrq        = C.IB_USER_VERBS_CMD_CREATE_XSRQ
	CmdOpenQp            = C.IB_USER_VERBS_CMD_OPEN_QP

	ExCmdQueryDevice      = C.IB_USER_VERBS_EX_CMD_QUERY_DEVICE
	ExCmdCreateCq         = C.IB_USER_VERBS_EX_CMD_CREATE_CQ
	ExCmdCreateQp         = C.IB_USER_VERBS_EX_CMD_CREATE_QP
	ExCmdModifyQp         = C.IB_USER_VERBS_EX_CMD_MODIFY_QP
	ExCmdCreateFlow       = C.IB_USER_VERBS_EX_CMD_CREATE_FLOW
	ExCmdDestroyFlow      = C.IB_USER_VERBS_EX_CMD_DESTROY_FLOW
	ExCmdCreateWq         = C.IB_USER_VERBS_EX_CMD_CREATE_WQ
	ExCmdModifyWq         = C.IB_USER_VERBS_EX_CMD_MODIFY_WQ
	ExCmdDestroyWq        = C.IB_USER_VERBS_EX_CMD_DESTROY_WQ
	ExCmdCreateRwqIndTbl  = C.IB_USER_VERBS_EX_CMD_CREATE_RWQ_IND_TBL
	ExCmdDestroyRwqIndTbl = C.IB_USER_VERBS_EX_CMD_DESTROY_RWQ_IND_TBL
	ExCmdModifyCq         = C.IB_USER_VERBS_EX_CMD_MODIFY_CQ

	CmdCommandMask  = C.IB_USER_VERBS_CMD_COMMAND_MASK
	CmdFlagExtended = C.IB_USER_VERBS_CMD_FLAG_EXTENDED
	ABIVersion      = C.IB_USER_VERBS_ABI_VERSION
	CmdThreshold    = C.IB_USER_VERBS_CMD_THRESHOLD

	UcmABIVersion      = C.RDMA_USER_CM_ABI_VERSION
	UcmCmdCreateID     = C.RDMA_USER_CM_CMD_CREATE_ID
	UcmCmdDestroyID    = C.RDMA_USER_CM_CMD_DESTROY_ID
	UcmCmdBindIP       = C.RDMA_USER_CM_CMD_BIND_IP
	UcmCmdResolveIP    = C.RDMA_USER_CM_CMD_RESOLVE_IP
	UcmCmdResolveRoute = C.RDMA_USER_CM_CMD_RESOLVE_ROUTE
	UcmCmdQueryRoute   = C.RDMA_USER_CM_CMD_QUERY_ROUTE
	UcmCmdConnect      = C.RDMA_USER_CM_CMD_CONNECT
	UcmCmdListen       = C.RDMA_USER_CM_CMD_LISTEN
	UcmCmdAccept       = C.RDMA_USER_CM_CMD_ACCEPT
	UcmCmdReject       = C.RDMA_USER_CM_CMD_REJECT
	UcmCmdDisconnect   = C.RDMA_USER_CM_CMD_DISCONNECT
	UcmCmdInitQPAttr   = C.RDMA_USER_CM_CMD_INIT_QP_ATTR
	UcmCmdGetEvent     = C.RDMA_USER_CM_CMD_GET_EVENT
	UcmCmdGetOption    = C.RDMA_USER_CM_CMD_GET_OPTION
	UcmCmdSetOption    = C.RDMA_USER_CM_CMD_SET_OPTION
	UcmCmdNotify       = C.RDMA_USER_CM_CMD_NOTIFY
	UcmCmdJoinIPMcast  = C.RDMA_USER_CM_CMD_JOIN_IP_MCAST
	UcmCmdLeaveMcast   = C.RDMA_USER_CM_CMD_LEAVE_MCAST
	UcmCmdMigrateID    = C.RDMA_USER_CM_CMD_MIGRATE_ID
	UcmCmdQuery        = C.RDMA_USER_CM_CMD_QUERY
	UcmCmdBind         = C.RDMA_USER_CM_CMD_BIND
	UcmCmdResolveAddr  = C.RDMA_USER_CM_CMD_RESOLVE_ADDR
	UcmCmdJoinMcast    = C.RDMA_USER_CM_CMD_JOIN_MCAST
	UcmQueryAddr       = C.RDMA_USER_CM_QUERY_ADDR
	UcmQueryPath       = C.RDMA_USER_CM_QUERY_PATH
	UcmQueryGID        = C.RDMA_USER_CM_QUERY_GID
	RxeNetworkTypeIPv4 = C.RXE_NETWORK_TYPE_IPV4
	RxeNetworkTypeIPv6 = C.RXE_NETWORK_TYPE_IPV6

	// The ioctl ABI: the request, attribute flags, the driver, objects,
	// methods and attributes (<rdma/ib_user_ioctl_cmds.h>).
	RdmaVerbsIoctl              = C.RDMA_VERBS_IOCTL
	AttrFMandatory              = C.UVERBS_ATTR_F_MANDATORY
	AttrFValidOutput            = C.UVERBS_ATTR_F_VALID_OUTPUT
	DriverRxe                   = C.RDMA_DRIVER_RXE
	IDNsMask                    = C.UVERBS_ID_NS_MASK
	AttrUhwIn                   = C.UVERBS_ATTR_UHW_IN
	AttrUhwOut                  = C.UVERBS_ATTR_UHW_OUT
	ObjectDevice                = C.UVERBS_OBJECT_DEVICE
	ObjectPD                    = C.UVERBS_OBJECT_PD
	ObjectCompChannel           = C.UVERBS_OBJECT_COMP_CHANNEL
	ObjectCQ                    = C.UVERBS_OBJECT_CQ
	ObjectQP                    = C.UVERBS_OBJECT_QP
	ObjectSRQ                   = C.UVERBS_OBJECT_SRQ
	ObjectAH                    = C.UVERBS_OBJECT_AH
	ObjectMR                    = C.UVERBS_OBJECT_MR
	ObjectMW                    = C.UVERBS_OBJECT_MW
	ObjectAsyncEvent            = C.UVERBS_OBJECT_ASYNC_EVENT
	MethodInvokeWrite           = C.UVERBS_METHOD_INVOKE_WRITE
	MethodInfoHandles           = C.UVERBS_METHOD_INFO_HANDLES
	MethodQueryPort             = C.UVERBS_METHOD_QUERY_PORT
	MethodGetContext            = C.UVERBS_METHOD_GET_CONTEXT
	MethodQueryContext          = C.UVERBS_METHOD_QUERY_CONTEXT
	MethodAsyncEventAlloc       = C.UVERBS_METHOD_ASYNC_EVENT_ALLOC
	AttrCoreIn                  = C.UVERBS_ATTR_CORE_IN
	AttrCoreOut                 = C.UVERBS_ATTR_CORE_OUT
	AttrWriteCmd                = C.UVERBS_ATTR_WRITE_CMD
	AttrInfoObjectID            = C.UVERBS_ATTR_INFO_OBJECT_ID
	AttrInfoTotalHandles        = C.UVERBS_ATTR_INFO_TOTAL_HANDLES
	AttrInfoHandlesList         = C.UVERBS_ATTR_INFO_HANDLES_LIST
	AttrQueryPortPortNum        = C.UVERBS_ATTR_QUERY_PORT_PORT_NUM
	AttrQueryPortResp           = C.UVERBS_ATTR_QUERY_PORT_RESP
	AttrGetContextNumComp       = C.UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS
	AttrGetContextCore          = C.UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT
	AttrQueryContextNumComp     = C.UVERBS_ATTR_QUERY_CONTEXT_NUM_COMP_VECTORS
	AttrQueryContextCore        = C.UVERBS_ATTR_QUERY_CONTEXT_CORE_SUPPORT
	AttrAsyncEventAllocFd       = C.UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE
	CoreSupportOptionalMrAccess = C.IB_UVERBS_CORE_SUPPORT_OPTIONAL_MR_ACCESS
	MethodQueryGidEntry         = C.UVERBS_METHOD_QUERY_GID_ENTRY
	MethodQueryGidTable         = C.UVERBS_METHOD_QUERY_GID_TABLE
	AttrGidTableEntrySize       = C.UVERBS_ATTR_QUERY_GID_TABLE_ENTRY_SIZE
	AttrGidTableFlags           = C.UVERBS_ATTR_QUERY_GID_TABLE_FLAGS
	AttrGidTableEntries         = C.UVERBS_ATTR_QUERY_GID_TABLE_RESP_ENTRIES
	AttrGidTableNumEntries      = C.UVERBS_ATTR_QUERY_GID_TABLE_RESP_NUM_ENTRIES
	AttrGidEntryPort            = C.UVERBS_ATTR_QUERY_GID_ENTRY_PORT
	AttrGidEntryIndex           = C.UVERBS_ATTR_QUERY_GID_ENTRY_GID_INDEX
	AttrGidEntryFlags           = C.UVERBS_ATTR_QUERY_GID_ENTRY_FLAGS
	AttrGidEntryResp            = C.UVERBS_ATTR_QUERY_GID_ENTRY_RESP_ENTRY
	GidTypeIB                   = C.IB_UVERBS_GID_TYPE_IB
	GidTypeRoCEv1               = C.IB_UVERBS_GID_TYPE_ROCE_V1
	GidTypeRoCEv2               = C.IB_UVERBS_GID_TYPE_ROCE_V2
	MethodCqCreate              = C.UVERBS_METHOD_CQ_CREATE
	MethodCqDestroy             = C.UVERBS_METHOD_CQ_DESTROY
	AttrCreateCqHandle          = C.UVERBS_ATTR_CREATE_CQ_HANDLE
	AttrCreateCqCqe             = C.UVERBS_ATTR_CREATE_CQ_CQE
	AttrCreateCqUserHandle      = C.UVERBS_ATTR_CREATE_CQ_USER_HANDLE
	AttrCreateCqCompChannel     = C.UVERBS_ATTR_CREATE_CQ_COMP_CHANNEL
	AttrCreateCqCompVector      = C.UVERBS_ATTR_CREATE_CQ_COMP_VECTOR
	AttrCreateCqFlags           = C.UVERBS_ATTR_CREATE_CQ_FLAGS
	AttrCreateCqRespCqe         = C.UVERBS_ATTR_CREATE_CQ_RESP_CQE
	AttrCreateCqEventFd         = C.UVERBS_ATTR_CREATE_CQ_EVENT_FD
	AttrDestroyCqHandle         = C.UVERBS_ATTR_DESTROY_CQ_HANDLE
	AttrDestroyCqResp           = C.UVERBS_ATTR_DESTROY_CQ_RESP
	CqFlagsTimestamp            = C.IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION
	CqFlagsIgnoreOverrun        = C.IB_UVERBS_CQ_FLAGS_IGNORE_OVERRUN
	MethodQpCreate              = C.UVERBS_METHOD_QP_CREATE
	MethodQpDestroy             = C.UVERBS_METHOD_QP_DESTROY
	AttrCreateQpHandle          = C.UVERBS_ATTR_CREATE_QP_HANDLE
	AttrCreateQpXrcdHandle      = C.UVERBS_ATTR_CREATE_QP_XRCD_HANDLE
	AttrCreateQpPdHandle        = C.UVERBS_ATTR_CREATE_QP_PD_HANDLE
	AttrCreateQpSrqHandle       = C.UVERBS_ATTR_CREATE_QP_SRQ_HANDLE
	AttrCreateQpSendCqHandle    = C.UVERBS_ATTR_CREATE_QP_SEND_CQ_HANDLE
	AttrCreateQpRecvCqHandle    = C.UVERBS_ATTR_CREATE_QP_RECV_CQ_HANDLE
	AttrCreateQpIndTable        = C.UVERBS_ATTR_CREATE_QP_IND_TABLE_HANDLE
	AttrCreateQpUserHandle      = C.UVERBS_ATTR_CREATE_QP_USER_HANDLE
	AttrCreateQpCap             = C.UVERBS_ATTR_CREATE_QP_CAP
	AttrCreateQpType            = C.UVERBS_ATTR_CREATE_QP_TYPE
	AttrCreateQpFlags           = C.UVERBS_ATTR_CREATE_QP_FLAGS
	AttrCreateQpSourceQpn       = C.UVERBS_ATTR_CREATE_QP_SOURCE_QPN
	AttrCreateQpEventFd         = C.UVERBS_ATTR_CREATE_QP_EVENT_FD
	AttrCreateQpRespCap         = C.UVERBS_ATTR_CREATE_QP_RESP_CAP
	AttrCreateQpRespQpNum       = C.UVERBS_ATTR_CREATE_QP_RESP_QP_NUM
	AttrDestroyQpHandle         = C.UVERBS_ATTR_DESTROY_QP_HANDLE
	AttrDestroyQpResp           = C.UVERBS_ATTR_DESTROY_QP_RESP
	QpCreateSqSigAll            = C.IB_UVERBS_QP_CREATE_SQ_SIG_ALL
	QpCreateFlagsAll            = C.IB_UVERBS_QP_CREATE_BLOCK_MULTICAST_LOOPBACK | C.IB_UVERBS_QP_CREATE_SCATTER_FCS | C.IB_UVERBS_QP_CREATE_CVLAN_STRIPPING | C.IB_UVERBS_QP_CREATE_PCI_WRITE_END_PADDING | C.IB_UVERBS_QP_CREATE_SQ_SIG_ALL
	MethodSrqDestroy            = C.UVERBS_METHOD_SRQ_DESTROY
	AttrDestroySrqHandle        = C.UVERBS_ATTR_DESTROY_SRQ_HANDLE
	AttrDestroySrqResp          = C.UVERBS_ATTR_DESTROY_SRQ_RESP
	MethodMrDestroy             = C.UVERBS_METHOD_MR_DESTROY
	AttrDestroyMrHandle         = C.UVERBS_ATTR_DESTROY_MR_HANDLE
	MethodPdDestroy             = C.UVERBS_METHOD_PD_DESTROY
	AttrDestroyPdHandle         = C.UVERBS_ATTR_DESTROY_PD_HANDLE
	MethodAhDestroy             = C.UVERBS_METHOD_AH_DESTROY
	AttrDestroyAhHandle         = C.UVERBS_ATTR_DESTROY_AH_HANDLE
	MethodMwDestroy             = C.UVERBS_METHOD_MW_DESTROY
	AttrDestroyMwHandle         = C.UVERBS_ATTR_DESTROY_MW_HANDLE
)
