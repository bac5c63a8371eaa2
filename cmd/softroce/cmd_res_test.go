package main

import "testing"

// TestResFiltersMatchFieldsAndPorts: softroce res keeps the lines whose
// fields have the filters' values, with src-port and dst-port taken from
// the addresses (IPv6 ones too), as the rdma tool's filters do.
func TestResFiltersMatchFieldsAndPorts(t *testing.T) {
	const v4 = "link rxe0/1 cm-idn 3 lqpn 17 qp-type RC state CONNECT ps TCP pid 42 comm rping src-addr 10.0.0.1:7174 dst-addr 10.0.0.2:40000\n"
	const v6 = "link rxe0/- cm-idn 4 state LISTEN ps UDP pid 43 comm udaddy src-addr fd00::1:7174\n"
	for _, c := range []struct {
		line    string
		filters []string
		want    bool
	}{
		{v4, nil, true},
		{v4, []string{"state", "CONNECT"}, true},
		{v4, []string{"state", "LISTEN"}, false},
		{v4, []string{"src-port", "7174", "dst-port", "40000"}, true},
		{v4, []string{"dst-port", "7174"}, false},
		{v4, []string{"lqpn", "17", "comm", "rping"}, true},
		{v6, []string{"src-port", "7174", "ps", "UDP"}, true},
		{v6, []string{"src-addr", "fd00::1:7174"}, true},
		{v6, []string{"dst-port", "7174"}, false}, // no destination
		{v6, []string{"lqpn", "0"}, false},        // no QP yet
	} {
		if got := resLineMatches(c.line, c.filters); got != c.want {
			t.Errorf("%q with %q: %v, want %v", c.line, c.filters, got, c.want)
		}
	}
}
