// Package edge holds softroce_edge, a C program that drives the edge cases
// of the verbs through the distribution's libibverbs and reports what the
// device answered (illegal modify QP transitions and their errno, flushes
// on ERR, a bad rkey, RNR retries exhausted, transport retries exhausted
// against a silent peer, a peer process killed mid-transfer), and Build,
// which compiles it with the system C compiler. Tests run it on softroce
// through `softroce run` and compare its lines with the kernel's answers;
// the same program runs unchanged on a host with the kernel's rxe.
//
// Its output is one line per observation, "CASE CHECK RESULT" (see the
// comment at the top of c/softroce_edge.c); Parse reads it.
package edge

import (
	"bufio"
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

//go:embed c/softroce_edge.c
var source []byte

// Source returns the program's C source.
func Source() []byte { return bytes.Clone(source) }

// Cases are the program's cases, in the order it documents them.
var Cases = []string{"illegal", "flush", "send", "badrkey", "rnr", "silent", "killed"}

// Build compiles the program into dir (which must exist) with the C
// compiler cc ("" means $CC, else "cc") and libibverbs, and returns the
// executable's path (mode 0755, so that another user may run it). It
// needs libibverbs' headers (Debian: libibverbs-dev).
func Build(dir, cc string) (string, error) {
	if cc == "" {
		cc = os.Getenv("CC")
	}
	if cc == "" {
		cc = "cc"
	}
	src := filepath.Join(dir, "softroce_edge.c")
	if err := os.WriteFile(src, source, 0o644); err != nil {
		return "", fmt.Errorf("edge: %w", err)
	}
	exe := filepath.Join(dir, "softroce_edge")
	cmd := exec.Command(cc, "-O2", "-Wall", "-Werror", "-o", exe, src, "-libverbs")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.Error
		if errors.As(err, &ee) {
			return "", fmt.Errorf("edge: building softroce_edge needs a C compiler (install gcc, or set CC): %w", err)
		}
		return "", fmt.Errorf("edge: %s: %w (are libibverbs' headers installed? Debian: libibverbs-dev)\n%s", cmd, err, stderr.String())
	}
	if err := os.Chmod(exe, 0o755); err != nil {
		return "", fmt.Errorf("edge: %w", err)
	}
	return exe, nil
}

// Result is what the program observed for one check of one case.
type Result struct {
	Case, Check, Result string
}

// Parse reads the program's output: the results by "CASE CHECK", in
// order. Lines that are not three fields (a setup failure says more) are
// returned as an error naming them.
func Parse(out []byte) (map[string]string, []Result, error) {
	m := map[string]string{}
	var rs []Result
	var bad []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 || f[1] == "setup" {
			bad = append(bad, sc.Text())
			continue
		}
		r := Result{f[0], f[1], f[2]}
		m[r.Case+" "+r.Check] = r.Result
		rs = append(rs, r)
	}
	if len(bad) > 0 {
		return m, rs, fmt.Errorf("edge: unexpected lines: %q", bad)
	}
	return m, rs, nil
}
