package uverbsd_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softroce/softroce/node"
	"github.com/softroce/softroce/uverbsd"
)

// TestControlSocketServesItsCommands: the control socket sits in the
// private directory, runs the commands it was given (and its own "res")
// with their arguments,
// returns their output and errors, refuses an unknown command and a
// malformed request with a clear error, and goes away with the server.
func TestControlSocketServesItsCommands(t *testing.T) {
	n, err := node.New(context.Background(), node.Config{Name: "rxe0", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	dir := filepath.Join(t.TempDir(), "rxe0")
	srv, err := uverbsd.New(uverbsd.Config{Device: n.Device(), Dir: dir, Control: map[string]uverbsd.ControlFunc{
		"echo": func(args []string) (string, error) { return strings.Join(args, "|"), nil },
		"fail": func([]string) (string, error) { return "partial", errors.New("it failed") },
	}})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	if out, err := uverbsd.Control(dir, "echo", "a b", "c"); err != nil || out != "a b|c" {
		t.Errorf("echo: %q %v", out, err)
	}
	if out, err := uverbsd.Control(dir, "fail"); err == nil || err.Error() != "it failed" || out != "partial" {
		t.Errorf("fail: %q %v", out, err)
	}
	if _, err := uverbsd.Control(dir, "nope"); err == nil || !strings.Contains(err.Error(), `unknown command "nope" (the daemon serves: [echo fail methods res])`) {
		t.Errorf("unknown command: %v", err)
	}
	if out, err := uverbsd.Control(dir, "methods"); err != nil || out != "" {
		t.Errorf("methods of a daemon without programs: %q %v", out, err)
	}
	if _, err := uverbsd.Control(dir, "methods", "nope"); err == nil {
		t.Error("methods nope: no error")
	}
	if out, err := uverbsd.Control(dir, "res", "cm_id"); err != nil || out != "" {
		t.Errorf("res of a daemon without programs: %q %v", out, err)
	}
	if _, err := uverbsd.Control(dir, "res", "qp"); err == nil || !strings.Contains(err.Error(), `resource "qp": the daemon lists cm_id`) {
		t.Errorf("res qp: %v", err)
	}
	c, err := net.Dial("unix", filepath.Join(dir, uverbsd.ControlName))
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("not json\n"))
	b := make([]byte, 4096)
	k, _ := c.Read(b)
	c.Close()
	if !strings.Contains(string(b[:k]), "request is not a JSON object") {
		t.Errorf("malformed request: %s", b[:k])
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, uverbsd.ControlName)); !os.IsNotExist(err) {
		t.Errorf("control socket after Close: %v", err)
	}
	if _, err := uverbsd.Control(dir, "echo"); err == nil {
		t.Error("a closed daemon answered")
	}
}
