package uverbsd

import (
	"bytes"
	"os"
	"strconv"

	"github.com/softroce/softroce/check"
)

// checker is a File that a check.Program can watch (uverbs.File).
type checker interface {
	SetCheck(p *check.Program)
}

// startCheck has the Set of Config.Check watch the file the client pid
// opened, if the file can be watched.
func (s *Server) startCheck(file any, pid int) {
	c, ok := file.(checker)
	if !ok || s.cfg.Check == nil {
		return
	}
	c.SetCheck(s.cfg.Check.Program(pid, comm(pid), ancestors(pid)))
}

// ancestors returns the pids of pid's parent, its parent's, and so on up
// to init, as /proc/PID/stat names them; a process that is gone ends the
// list.
func ancestors(pid int) []int {
	var out []int
	for len(out) < 64 {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			break
		}
		// pid (comm) state ppid ...: comm may hold anything but ends at
		// the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			break
		}
		f := bytes.Fields(b[i+1:])
		if len(f) < 2 {
			break
		}
		ppid, err := strconv.Atoi(string(f[1]))
		if err != nil || ppid <= 1 {
			break
		}
		out = append(out, ppid)
		pid = ppid
	}
	return out
}
