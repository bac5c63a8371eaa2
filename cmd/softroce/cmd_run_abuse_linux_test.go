package main

import (
	"encoding/binary"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/preload"
)

// TestGarbageClientLeavesOthersIntact: while one client sends thousands of
// seeded random frames and uverbs commands (random command numbers,
// lengths, handles and user pointers into its own address space) and
// opens and drops connections, a well-behaved ibv_rc_pingpong pair on the
// same daemon completes with its data checked, and the daemon serves on.
func TestGarbageClientLeavesOthersIntact(t *testing.T) {
	tool := distroTool(t, "ibv_rc_pingpong", "ibverbs-utils")
	needCC(t)
	home := userHome(t)
	env := serveAsUser(t, home, "rxe2", "--ip", "10.78.0.1/24")
	// The garbage client is this test binary, run as the same user as
	// the programs: the daemon writes its random responses into it.
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(home, "garbage.test")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	seed := testenv.Seed(t)
	garbage := userCommand(t, home, append(env, "SOFTROCE_GARBAGE_SEED="+strconv.FormatUint(seed, 10)),
		bin, "-test.run=^TestHelperGarbageClient$", "-test.v")
	gout := make(chan []byte, 1)
	go func() {
		out, err := garbage.CombinedOutput()
		if err != nil {
			out = append(out, []byte("\nexit: "+err.Error())...)
		}
		gout <- out
	}()
	pingpongs(t, home, env, tool, []string{"-d", "rxe2", "-g", "1", "-n", "500", "-c", "-p", "18821"},
		"4096000 bytes in", "4096000 bytes in")
	select {
	case out := <-gout:
		t.Logf("garbage client:\n%s", out)
		if garbage.ProcessState == nil || !garbage.ProcessState.Success() {
			t.Fatalf("the garbage client failed (the daemon went away?)")
		}
	case <-time.After(60 * time.Second):
		garbage.Process.Kill()
		t.Fatal("the garbage client did not finish")
	}
	// The daemon still serves.
	pingpongs(t, home, env, tool, []string{"-d", "rxe2", "-g", "1", "-n", "100", "-c", "-p", "18822"},
		"819200 bytes in", "819200 bytes in")
}

// TestHelperGarbageClient is the garbage client of
// TestGarbageClientLeavesOthersIntact (it runs only in that test's child).
func TestHelperGarbageClient(t *testing.T) {
	seedStr := os.Getenv("SOFTROCE_GARBAGE_SEED")
	if seedStr == "" {
		t.Skip("the child of TestGarbageClientLeavesOthersIntact")
	}
	seed, _ := strconv.ParseUint(seedStr, 10, 64)
	rng := rand.New(rand.NewPCG(seed, 1))
	sock := os.Getenv("SOFTROCE_SOCK")
	scratch := make([]byte, 1<<16) // where some response pointers point
	base := uint64(uintptr(unsafe.Pointer(&scratch[0])))
	replies := 0
	for conn := 0; conn < 20; conn++ {
		c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
		if err != nil {
			t.Fatalf("connection %d: %v", conn, err)
		}
		send := func(h preload.Header, p []byte) bool {
			if _, err := c.Write(preload.Frame(h, p)); err != nil {
				t.Fatalf("send: %v", err)
			}
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			buf := make([]byte, 4096)
			n, _, _, _, err := c.ReadMsgUnix(buf, make([]byte, 256))
			if err != nil {
				t.Fatalf("the daemon did not answer: %v", err)
			}
			rh, _, err := preload.ParseFrame(buf[:n])
			if err != nil {
				t.Fatalf("reply: %v", err)
			}
			replies++
			return rh.Ret >= 0
		}
		send(preload.Header{Op: preload.OpOpen, Aux: preload.Version}, []byte("uverbs0"))
		for i := 0; i < 200; i++ {
			n := rng.IntN(96)
			p := make([]byte, n)
			for j := range p {
				p[j] = byte(rng.Uint32())
			}
			if n >= 8 {
				// A plausible header: a known command number, the
				// length in words, sometimes the extended flag.
				binary.NativeEndian.PutUint32(p, uint32(rng.IntN(0x30))|uint32(rng.IntN(2))<<31)
				binary.NativeEndian.PutUint16(p[4:], uint16(n/4))
			}
			// Response pointers into this process's scratch buffer,
			// or anywhere.
			for off := 8; off+8 <= n; off += 8 {
				if rng.IntN(2) == 0 {
					binary.NativeEndian.PutUint64(p[off:], base+uint64(rng.IntN(len(scratch)-256)))
				}
			}
			switch rng.IntN(10) {
			case 0:
				b := make([]byte, 16)
				binary.NativeEndian.PutUint64(b, uint64(rng.IntN(1<<20))*4096)
				binary.NativeEndian.PutUint64(b[8:], 4096)
				send(preload.Header{Op: preload.OpMmap}, b)
			case 1:
				send(preload.Header{Op: preload.Op(rng.IntN(8))}, p)
			default:
				send(preload.Header{Op: preload.OpWrite}, p)
			}
		}
		c.Close()
	}
	runtime.KeepAlive(scratch)
	t.Logf("%d replies", replies)
}
