package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/softroce/softroce/node"
	"github.com/softroce/softroce/uverbsd"
)

// TestRunWaitsForAStartingDaemon: a `softroce run` that finds the name
// held by a daemon still setting up (its lock taken, its tree not yet
// published) waits for it and uses it; when that daemon ends without ever
// becoming ready, run serves the name itself.
func TestRunWaitsForAStartingDaemon(t *testing.T) {
	needCC(t)
	userDirs(t)
	dir, err := uverbsd.DeviceDir("rxe6")
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(context.Background(), node.Config{Name: "rxe6", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	starting := func() *uverbsd.Server {
		srv, err := uverbsd.New(uverbsd.Config{Device: n.Device(), Dir: dir, PublishLater: true})
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve()
		return srv
	}
	// The program prints the device the published tree names.
	prog := []string{"run", "-d", "rxe6", "--", "sh", "-c", `cat "$SYSFS_PATH/class/infiniband_verbs/uverbs0/ibdev"`}
	runIt := func() (chan int, *bytes.Buffer) {
		var out bytes.Buffer
		code := make(chan int, 1)
		go func() { code <- run(prog, &out, &out) }()
		return code, &out
	}

	srv := starting()
	code, out := runIt()
	time.Sleep(300 * time.Millisecond)
	select {
	case c := <-code:
		t.Fatalf("run ended (exit %d) before the starting daemon was ready:\n%s", c, out.String())
	default:
	}
	if err := srv.Publish(); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-code:
		if c != 0 || out.String() != "rxe6\n" {
			t.Fatalf("run on the daemon once ready: exit %d:\n%s", c, out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run still waiting 20 s after the daemon became ready")
	}
	if srv.Clients() != 0 {
		t.Errorf("%d clients left", srv.Clients())
	}
	srv.Close()

	// A daemon that ends before it is ready leaves the name to run.
	srv = starting()
	code, out = runIt()
	time.Sleep(300 * time.Millisecond)
	srv.Close()
	select {
	case c := <-code:
		if c != 0 || out.String() != "rxe6\n" {
			t.Fatalf("run after the starting daemon ended: exit %d:\n%s", c, out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run still waiting 20 s after the starting daemon ended")
	}
}
