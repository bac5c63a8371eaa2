// Package coverage records what a program made an emulated device go
// through and reports it against the kernel's own space: for each QP type,
// the cells of the transition table of ib_modify_qp_is_ok (package
// qpstate) taken, never taken and attempted against the table; the
// attribute bits given per transition; the completion statuses by opcode
// and the async events seen and never seen (the complete lists are emu's
// enums); the verbs that failed with their errno; and the transport's
// NAK, RNR, retry and timeout counters.
//
// A Recorder is an emu.Recorder: set it in emu.Config.Recorder and it sees
// one device; a Collector holds the recorders of one run's devices (a
// daemon's, loopback's two) and makes one profile of them. A Profile is
// the data; profiles of several devices and several runs merge like Go's
// coverage profiles (go tool covdata merge): the counts add and the cells
// are the union.
//
// # File format
//
// A profile file is one JSON object (Encode writes it indented, Decode
// reads it and rejects unknown fields, unknown names and other versions):
//
//	{
//	  "version": 1,                       // FormatVersion
//	  "runs": 1,                          // runs merged into the file
//	  "devices": ["rxe0", "rxe1"],        // devices recorded (sorted, distinct)
//	  "modify": [                         // one cell per distinct modify QP
//	    {"type": "RC", "cur": "RESET", "next": "INIT",
//	     "mask": "STATE|ACCESS_FLAGS|PKEY_INDEX|PORT", "errno": "", "count": 1}
//	  ],
//	  "completions": [{"opcode": "IB_WC_SEND", "status": "IB_WC_SUCCESS", "count": 9}],
//	  "events": [{"event": "IB_EVENT_COMM_EST", "count": 1}],
//	  "verbs": [{"verb": "modify_qp", "errno": "EINVAL", "count": 1}],
//	  "transport": [{"counter": "rcvd_rnr_err", "count": 2}],
//	  "faults": [{"rule": "verbs:fail,verb=create_qp,errno=ENOMEM,count=1",
//	              "action": "fail ENOMEM", "count": 1}]   // only when faults acted
//	}
//
// type, cur, next and mask are qpstate's short names (ParseType,
// ParseState, ParseAttrMask read them); errno is the errno's name
// ("EINVAL"), "" for success; opcode, status and event are the kernel
// names emu's String methods print; counter is an rxe hw_counters name
// (TransportCounters); rule is a fault rule as package fault writes it and
// action what it did. Every list is sorted and has no two cells with the
// same key; count is at least 1.
package coverage
