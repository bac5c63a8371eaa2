package uverbsd

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/preload"
	"github.com/softroce/softroce/uverbs"
)

// ControlName is the name of the control socket in the Server's
// directory: softroce's own commands (res, coverage --live, fault add|del|list)
// talk to a serving daemon there. It is in the same private directory as
// the device's socket, so only the daemon's user reaches it.
const ControlName = "ctl"

// ControlFunc serves one control command: args are the command's
// arguments; the output goes back to the caller as it is.
type ControlFunc func(args []string) (output string, err error)

// ControlRequest is one request on the control socket: one JSON object
// on one line.
type ControlRequest struct {
	Command string   `json:"command"`
	Args    []string `json:"args"`
}

// ControlReply is the daemon's answer, one JSON object, after which it
// closes the connection.
type ControlReply struct {
	Output string `json:"output"`
	Error  string `json:"error,omitempty"`
}

// maxControl bounds a control request and a reply the client reads.
const (
	maxControlRequest = 64 << 10
	maxControlReply   = 64 << 20
)

// listenControl listens on the control socket; a stale socket file is
// replaced (New holds the lock).
func (s *Server) listenControl() error {
	if len(s.cfg.Control) == 0 {
		return nil
	}
	path := filepath.Join(s.cfg.Dir, ControlName)
	if err := unix.Unlink(path); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return err
	}
	ln.SetUnlinkOnClose(true)
	s.ctl = ln
	s.wg.Add(1)
	go s.serveControl()
	return nil
}

func (s *Server) serveControl() {
	defer s.wg.Done()
	for {
		c, err := s.ctl.AcceptUnix()
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			s.logf("control: accept: %v", err)
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			s.control(c)
		}()
	}
}

// control serves one control connection: one request, one reply.
func (s *Server) control(c *net.UnixConn) {
	c.SetDeadline(time.Now().Add(30 * time.Second))
	line, err := bufio.NewReader(io.LimitReader(c, maxControlRequest)).ReadBytes('\n')
	var rep ControlReply
	var req ControlRequest
	switch {
	case err != nil:
		rep.Error = fmt.Sprintf("control: request: %v (one JSON object on one line, at most %d bytes)", err, maxControlRequest)
	case json.Unmarshal(line, &req) != nil:
		rep.Error = "control: request is not a JSON object {\"command\": ..., \"args\": [...]}"
	default:
		fn, ok := s.cfg.Control[req.Command]
		if !ok {
			rep.Error = fmt.Sprintf("control: unknown command %q (the daemon serves: %v)", req.Command, s.controlNames())
			break
		}
		out, err := fn(req.Args)
		rep.Output = out
		if err != nil {
			rep.Error = err.Error()
		}
	}
	if rep.Error != "" {
		s.logf("control %q: %s", req.Command, rep.Error)
	}
	b, _ := json.Marshal(&rep)
	c.Write(append(b, '\n'))
}

func (s *Server) controlNames() []string {
	var names []string
	for n := range s.cfg.Control {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Control sends one control command to the daemon whose directory is dir
// and returns its output. A daemon that is not there, or that serves no
// control socket, is an error wrapping ECONNREFUSED or ENOENT.
func Control(dir, command string, args ...string) (string, error) {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: filepath.Join(dir, ControlName), Net: "unix"})
	if err != nil {
		return "", fmt.Errorf("no daemon answers on %s: %w", dir, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	b, err := json.Marshal(&ControlRequest{Command: command, Args: args})
	if err != nil {
		return "", err
	}
	if _, err := c.Write(append(b, '\n')); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(io.LimitReader(c, maxControlReply)).ReadBytes('\n')
	if err != nil {
		return "", fmt.Errorf("control %s: reply: %w", command, err)
	}
	var rep ControlReply
	if err := json.Unmarshal(line, &rep); err != nil {
		return "", fmt.Errorf("control %s: reply: %w", command, err)
	}
	if rep.Error != "" {
		return rep.Output, errors.New(rep.Error)
	}
	return rep.Output, nil
}

// write is the File's Write, for a uverbs File with the Server's Intercept
// before it and its Recorder after it.
func (cn *conn) write(p []byte) (Reply, error) {
	cfg := &cn.s.cfg
	if _, ok := cn.file.(uverbsFile); !ok || cfg.Intercept == nil && cfg.Recorder == nil {
		return cn.file.Write(p)
	}
	name := uverbs.CommandName(p)
	var r Reply
	var err error
	if cfg.Intercept != nil {
		err = cfg.Intercept(name)
	}
	if err == nil {
		r, err = cn.file.Write(p)
	}
	if err != nil && cfg.Recorder != nil {
		verb := name
		if verb == "" {
			verb = "write"
		}
		cfg.Recorder.VerbFailed(verb, unix.Errno(-errno(err)))
	}
	return r, err
}

// ioctl serves an OpIoctl frame: the File's Ioctl, with the Server's
// Intercept before it and its Recorder after a failure (by the method's
// verb, uverbs.MethodVerb), and the method logged.
func (cn *conn) ioctl(h preload.Header, p []byte) bool {
	io, ok := cn.file.(Ioctler)
	if !ok {
		return cn.reply(preload.Header{Op: h.Op, Ret: -int32(unix.ENOTTY)}, nil, nil)
	}
	if len(p) < 8 {
		return cn.refuse(h.Op, "%v of %d bytes", h.Op, len(p))
	}
	arg, buf := binary.NativeEndian.Uint64(p), p[8:]
	name := uverbs.MethodName(buf)
	if name == "" {
		name = "ioctl"
	}
	// A method is its verb's write command to the faults and the
	// coverage, as on the write path; a method of no verb (a query, a
	// probe of the ABI) is neither failed by a fault nor recorded.
	verb := uverbs.MethodVerb(buf)
	cfg := &cn.s.cfg
	var r Reply
	var err error
	if cfg.Intercept != nil && verb != "" {
		err = cfg.Intercept(verb)
	}
	if err == nil {
		if cfg.Settle != nil {
			cfg.Settle(func() { r, err = io.Ioctl(arg, buf) })
		} else {
			r, err = io.Ioctl(arg, buf)
		}
	}
	cn.mrs.settleShares()
	var e unix.Errno
	if err != nil {
		e = unix.Errno(-errno(err))
	}
	cn.s.methods.add(cn.pid, name, e)
	if err != nil {
		if cfg.Recorder != nil && verb != "" {
			cfg.Recorder.VerbFailed(verb, unix.Errno(-errno(err)))
		}
		return cn.reply(preload.Header{Op: h.Op, Ret: errno(err)}, nil, nil)
	}
	if len(r.Files) > preload.MaxFiles {
		cn.warnf("ioctl returned %d files", len(r.Files))
		return cn.reply(preload.Header{Op: h.Op, Ret: -int32(unix.EIO)}, nil, nil)
	}
	return cn.pass(preload.Header{Op: h.Op}, r.Files)
}
