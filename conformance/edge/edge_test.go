package edge

import (
	"reflect"
	"testing"
)

func TestParseReadsResultsAndRefusesSetupFailures(t *testing.T) {
	m, rs, err := Parse([]byte("illegal RESET->RTR EINVAL\n\nflush send Work_Request_Flushed_Error\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"illegal RESET->RTR": "EINVAL", "flush send": "Work_Request_Flushed_Error"}
	if !reflect.DeepEqual(m, want) || len(rs) != 2 || rs[0].Case != "illegal" {
		t.Fatalf("Parse = %v %v", m, rs)
	}
	if _, _, err := Parse([]byte("rnr setup ibv_open_device: ENODEV\n")); err == nil {
		t.Fatal("a setup failure parsed without error")
	}
}
