//go:build ignore

// Input to cgo -godefs: the constants of RDMA netlink's NLDEV client
// (<rdma/rdma_netlink.h>) and what its replies name from other uapi
// headers, as the installed kernel headers define them. Run "go generate"
// in this directory to rewrite zconsts_linux.go.

package nldev

/*
#include <rdma/rdma_netlink.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/ib_user_ioctl_verbs.h>
#include <rdma/rdma_user_cm.h>
*/
import "C"

// The RDMA netlink clients (RDMA_NL_GET_CLIENT of a message type).
const (
	ClientIWCM  = C.RDMA_NL_IWCM
	ClientLS    = C.RDMA_NL_LS
	ClientNLDEV = C.RDMA_NL_NLDEV
	NumClients  = C.RDMA_NL_NUM_CLIENTS
	NumOpsIWPM  = C.RDMA_NL_IWPM_NUM_OPS
	NumOpsLS    = C.RDMA_NL_LS_NUM_OPS
)

// The NLDEV commands (enum rdma_nldev_command).
const (
	CmdUnspec        = C.RDMA_NLDEV_CMD_UNSPEC
	CmdGet           = C.RDMA_NLDEV_CMD_GET
	CmdSet           = C.RDMA_NLDEV_CMD_SET
	CmdNewlink       = C.RDMA_NLDEV_CMD_NEWLINK
	CmdDellink       = C.RDMA_NLDEV_CMD_DELLINK
	CmdPortGet       = C.RDMA_NLDEV_CMD_PORT_GET
	CmdSysGet        = C.RDMA_NLDEV_CMD_SYS_GET
	CmdSysSet        = C.RDMA_NLDEV_CMD_SYS_SET
	CmdResGet        = C.RDMA_NLDEV_CMD_RES_GET
	CmdResQPGet      = C.RDMA_NLDEV_CMD_RES_QP_GET
	CmdResCMIDGet    = C.RDMA_NLDEV_CMD_RES_CM_ID_GET
	CmdResCQGet      = C.RDMA_NLDEV_CMD_RES_CQ_GET
	CmdResMRGet      = C.RDMA_NLDEV_CMD_RES_MR_GET
	CmdResPDGet      = C.RDMA_NLDEV_CMD_RES_PD_GET
	CmdGetChardev    = C.RDMA_NLDEV_CMD_GET_CHARDEV
	CmdStatSet       = C.RDMA_NLDEV_CMD_STAT_SET
	CmdStatGet       = C.RDMA_NLDEV_CMD_STAT_GET
	CmdStatDel       = C.RDMA_NLDEV_CMD_STAT_DEL
	CmdResQPGetRaw   = C.RDMA_NLDEV_CMD_RES_QP_GET_RAW
	CmdResCQGetRaw   = C.RDMA_NLDEV_CMD_RES_CQ_GET_RAW
	CmdResMRGetRaw   = C.RDMA_NLDEV_CMD_RES_MR_GET_RAW
	CmdResCtxGet     = C.RDMA_NLDEV_CMD_RES_CTX_GET
	CmdResSRQGet     = C.RDMA_NLDEV_CMD_RES_SRQ_GET
	CmdStatGetStatus = C.RDMA_NLDEV_CMD_STAT_GET_STATUS
	NumOps           = C.RDMA_NLDEV_NUM_OPS
)

// The NLDEV attributes (enum rdma_nldev_attr).
const (
	AttrDevNodeType             = C.RDMA_NLDEV_ATTR_DEV_NODE_TYPE
	AttrUnspec                  = C.RDMA_NLDEV_ATTR_UNSPEC
	AttrPad                     = C.RDMA_NLDEV_ATTR_PAD
	AttrDevIndex                = C.RDMA_NLDEV_ATTR_DEV_INDEX
	AttrDevName                 = C.RDMA_NLDEV_ATTR_DEV_NAME
	AttrPortIndex               = C.RDMA_NLDEV_ATTR_PORT_INDEX
	AttrCapFlags                = C.RDMA_NLDEV_ATTR_CAP_FLAGS
	AttrFWVersion               = C.RDMA_NLDEV_ATTR_FW_VERSION
	AttrNodeGUID                = C.RDMA_NLDEV_ATTR_NODE_GUID
	AttrSysImageGUID            = C.RDMA_NLDEV_ATTR_SYS_IMAGE_GUID
	AttrSubnetPrefix            = C.RDMA_NLDEV_ATTR_SUBNET_PREFIX
	AttrLID                     = C.RDMA_NLDEV_ATTR_LID
	AttrSmLID                   = C.RDMA_NLDEV_ATTR_SM_LID
	AttrLMC                     = C.RDMA_NLDEV_ATTR_LMC
	AttrPortState               = C.RDMA_NLDEV_ATTR_PORT_STATE
	AttrPortPhysState           = C.RDMA_NLDEV_ATTR_PORT_PHYS_STATE
	AttrResSummary              = C.RDMA_NLDEV_ATTR_RES_SUMMARY
	AttrResSummaryEntry         = C.RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY
	AttrResSummaryEntryName     = C.RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY_NAME
	AttrResSummaryEntryCurr     = C.RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY_CURR
	AttrResQP                   = C.RDMA_NLDEV_ATTR_RES_QP
	AttrResQPEntry              = C.RDMA_NLDEV_ATTR_RES_QP_ENTRY
	AttrResLQPN                 = C.RDMA_NLDEV_ATTR_RES_LQPN
	AttrResRQPN                 = C.RDMA_NLDEV_ATTR_RES_RQPN
	AttrResRqPSN                = C.RDMA_NLDEV_ATTR_RES_RQ_PSN
	AttrResSqPSN                = C.RDMA_NLDEV_ATTR_RES_SQ_PSN
	AttrResPathMigState         = C.RDMA_NLDEV_ATTR_RES_PATH_MIG_STATE
	AttrResType                 = C.RDMA_NLDEV_ATTR_RES_TYPE
	AttrResState                = C.RDMA_NLDEV_ATTR_RES_STATE
	AttrResPID                  = C.RDMA_NLDEV_ATTR_RES_PID
	AttrResKernName             = C.RDMA_NLDEV_ATTR_RES_KERN_NAME
	AttrResCMID                 = C.RDMA_NLDEV_ATTR_RES_CM_ID
	AttrResCMIDEntry            = C.RDMA_NLDEV_ATTR_RES_CM_ID_ENTRY
	AttrResPS                   = C.RDMA_NLDEV_ATTR_RES_PS
	AttrResSrcAddr              = C.RDMA_NLDEV_ATTR_RES_SRC_ADDR
	AttrResDstAddr              = C.RDMA_NLDEV_ATTR_RES_DST_ADDR
	AttrResCQ                   = C.RDMA_NLDEV_ATTR_RES_CQ
	AttrResCQEntry              = C.RDMA_NLDEV_ATTR_RES_CQ_ENTRY
	AttrResCQE                  = C.RDMA_NLDEV_ATTR_RES_CQE
	AttrResUsecnt               = C.RDMA_NLDEV_ATTR_RES_USECNT
	AttrResPollCtx              = C.RDMA_NLDEV_ATTR_RES_POLL_CTX
	AttrResMR                   = C.RDMA_NLDEV_ATTR_RES_MR
	AttrResMREntry              = C.RDMA_NLDEV_ATTR_RES_MR_ENTRY
	AttrResRKey                 = C.RDMA_NLDEV_ATTR_RES_RKEY
	AttrResLKey                 = C.RDMA_NLDEV_ATTR_RES_LKEY
	AttrResIOVA                 = C.RDMA_NLDEV_ATTR_RES_IOVA
	AttrResMRLen                = C.RDMA_NLDEV_ATTR_RES_MRLEN
	AttrResPD                   = C.RDMA_NLDEV_ATTR_RES_PD
	AttrResPDEntry              = C.RDMA_NLDEV_ATTR_RES_PD_ENTRY
	AttrResLocalDMALKey         = C.RDMA_NLDEV_ATTR_RES_LOCAL_DMA_LKEY
	AttrResUnsafeGlobalRKey     = C.RDMA_NLDEV_ATTR_RES_UNSAFE_GLOBAL_RKEY
	AttrNetdevIndex             = C.RDMA_NLDEV_ATTR_NDEV_INDEX
	AttrNetdevName              = C.RDMA_NLDEV_ATTR_NDEV_NAME
	AttrDriver                  = C.RDMA_NLDEV_ATTR_DRIVER
	AttrDriverEntry             = C.RDMA_NLDEV_ATTR_DRIVER_ENTRY
	AttrDriverString            = C.RDMA_NLDEV_ATTR_DRIVER_STRING
	AttrDriverPrintType         = C.RDMA_NLDEV_ATTR_DRIVER_PRINT_TYPE
	AttrDriverS32               = C.RDMA_NLDEV_ATTR_DRIVER_S32
	AttrDriverU32               = C.RDMA_NLDEV_ATTR_DRIVER_U32
	AttrDriverS64               = C.RDMA_NLDEV_ATTR_DRIVER_S64
	AttrDriverU64               = C.RDMA_NLDEV_ATTR_DRIVER_U64
	AttrResPDN                  = C.RDMA_NLDEV_ATTR_RES_PDN
	AttrResCQN                  = C.RDMA_NLDEV_ATTR_RES_CQN
	AttrResMRN                  = C.RDMA_NLDEV_ATTR_RES_MRN
	AttrResCMIDN                = C.RDMA_NLDEV_ATTR_RES_CM_IDN
	AttrResCtxN                 = C.RDMA_NLDEV_ATTR_RES_CTXN
	AttrLinkType                = C.RDMA_NLDEV_ATTR_LINK_TYPE
	AttrDevProtocol             = C.RDMA_NLDEV_ATTR_DEV_PROTOCOL
	AttrChardevType             = C.RDMA_NLDEV_ATTR_CHARDEV_TYPE
	AttrChardevName             = C.RDMA_NLDEV_ATTR_CHARDEV_NAME
	AttrChardevABI              = C.RDMA_NLDEV_ATTR_CHARDEV_ABI
	AttrChardev                 = C.RDMA_NLDEV_ATTR_CHARDEV
	AttrUverbsDriverID          = C.RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID
	AttrStatMode                = C.RDMA_NLDEV_ATTR_STAT_MODE
	AttrStatRes                 = C.RDMA_NLDEV_ATTR_STAT_RES
	AttrStatAutoModeMask        = C.RDMA_NLDEV_ATTR_STAT_AUTO_MODE_MASK
	AttrStatCounter             = C.RDMA_NLDEV_ATTR_STAT_COUNTER
	AttrStatCounterEntry        = C.RDMA_NLDEV_ATTR_STAT_COUNTER_ENTRY
	AttrStatCounterID           = C.RDMA_NLDEV_ATTR_STAT_COUNTER_ID
	AttrStatHWCounters          = C.RDMA_NLDEV_ATTR_STAT_HWCOUNTERS
	AttrStatHWCounterEntry      = C.RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY
	AttrStatHWCounterEntryName  = C.RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME
	AttrStatHWCounterEntryValue = C.RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE
	AttrDevDIM                  = C.RDMA_NLDEV_ATTR_DEV_DIM
	AttrResRaw                  = C.RDMA_NLDEV_ATTR_RES_RAW
	AttrResCtx                  = C.RDMA_NLDEV_ATTR_RES_CTX
	AttrResCtxEntry             = C.RDMA_NLDEV_ATTR_RES_CTX_ENTRY
	AttrResSRQ                  = C.RDMA_NLDEV_ATTR_RES_SRQ
	AttrResSRQEntry             = C.RDMA_NLDEV_ATTR_RES_SRQ_ENTRY
	AttrResSRQN                 = C.RDMA_NLDEV_ATTR_RES_SRQN
	AttrStatHWCounterIndex      = C.RDMA_NLDEV_ATTR_STAT_HWCOUNTER_INDEX
	AttrStatHWCounterDynamic    = C.RDMA_NLDEV_ATTR_STAT_HWCOUNTER_DYNAMIC
	AttrMax                     = C.RDMA_NLDEV_ATTR_MAX
	AttrSysNetnsMode            = C.RDMA_NLDEV_SYS_ATTR_NETNS_MODE
	AttrSysCopyOnFork           = C.RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK
)

// Values the replies carry.
const (
	NodeIBCA         = C.RDMA_NODE_IB_CA
	DriverRXE        = C.RDMA_DRIVER_RXE
	UverbsABIVersion = C.IB_USER_VERBS_ABI_VERSION
	UcmaABIVersion   = C.RDMA_USER_CM_ABI_VERSION
	PrintTypeHex     = C.RDMA_NLDEV_PRINT_TYPE_HEX
)
