package workload_test

import (
	"fmt"
	"log"

	"github.com/softroce/softroce/oob"
	"github.com/softroce/softroce/workload"
)

// Two emulated HCAs in one process run ib_write_bw's loop; the server's
// memory is checked afterwards.
func ExampleLoopback_Perf() {
	lb, err := workload.NewLoopback(workload.LoopbackConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer lb.Close()
	client, server, err := lb.Perf(workload.PerfConfig{Test: oob.PerftestWriteBW, MaxSize: 4096, Iters: 100,
		GIDIndex: workload.LoopbackGIDIndex})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	defer server.Close()
	r, err := client.Run(4096) // the write_bw server has nothing to do
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.BW.Size, r.BW.Iters, r.BW.BWAvg > 0, workload.VerifyPerf(client, server))
	// Output: 4096 100 true <nil>
}

// ibv_rc_pingpong's loop between two emulated HCAs, with the -c check.
func ExampleLoopback_Pingpong() {
	lb, err := workload.NewLoopback(workload.LoopbackConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer lb.Close()
	client, server, err := lb.Pingpong(workload.PingpongConfig{Mode: oob.PingpongRC, Iters: 100, Check: true,
		GIDIndex: workload.LoopbackGIDIndex})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	defer server.Close()
	done := make(chan workload.PingpongResult)
	go func() {
		r, err := server.Run()
		if err != nil {
			log.Fatal(err)
		}
		done <- r
	}()
	if _, err := client.Run(); err != nil {
		log.Fatal(err)
	}
	r := <-done
	fmt.Println(r.Received, r.Sent, r.InvalidPages)
	// Output: 100 100 []
}
