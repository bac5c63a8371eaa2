package main

import (
	"strings"
	"testing"

	"github.com/softroce/softroce/oob"
	"github.com/softroce/softroce/rping"
)

// TestHelpEveryCommand: "softroce COMMAND -h", "--help" and "softroce help
// COMMAND" print the command's own usage on stdout and exit 0, for every
// registered command; the tool commands list their option tables and the
// link flags (--nodad among them, with no value).
func TestHelpEveryCommand(t *testing.T) {
	if len(commands) < 10 {
		t.Fatalf("only %d commands registered", len(commands))
	}
	for name := range commands {
		t.Run(name, func(t *testing.T) {
			code, out, errs := runCmd(t, name, "-h")
			if code != 0 || errs != "" || !strings.HasPrefix(out, "usage: softroce "+name+" ") {
				t.Fatalf("%s -h: exit %d, stderr %q, stdout:\n%s", name, code, errs, out)
			}
			if !strings.Contains(out, commands[name].summary) {
				t.Errorf("%s -h lacks the summary:\n%s", name, out)
			}
			for _, args := range [][]string{{name, "--help"}, {"help", name}} {
				code, out2, errs := runCmd(t, args...)
				if code != 0 || errs != "" || out2 != out {
					t.Errorf("%q: exit %d, stderr %q, stdout differs from -h:\n%s", args, code, errs, out2)
				}
			}
			if strings.Contains(out, "-nodad value") || strings.Contains(out, "-nodad ip") {
				t.Errorf("%s -h shows --nodad taking a value:\n%s", name, out)
			}
			var want []string
			switch name {
			case "pingpong":
				for m := oob.PingpongRC; m <= oob.PingpongSRQ; m++ {
					want = append(want, oob.PingpongSynopsis(m)...)
				}
			case "perf":
				for p := oob.PerftestWriteBW; p.IsValid(); p++ {
					want = append(want, oob.PerftestSynopsis(p)...)
				}
			case "rping":
				want = rping.Synopsis()
			}
			if want != nil {
				want = append(want, linkSynopsis(true)...)
				want = append(want, "[--nodad]", "--nodad\n")
			}
			if name == "stats" || name == "devinfo" {
				want = append(want, "[--tap NAME]", "[--nodad]", "[-d NAME]", "--nodad\n")
			}
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Errorf("%s -h lacks %q:\n%s", name, w, out)
				}
			}
		})
	}
}

// TestHelpTopLevel: "softroce help" lists every command; "help loopback"
// is loopback's help, not the list.
func TestHelpTopLevel(t *testing.T) {
	code, out, _ := runCmd(t, "help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for name := range commands {
		if !strings.Contains(out, "  "+name+" ") {
			t.Errorf("help lacks %s:\n%s", name, out)
		}
	}
	code, out, _ = runCmd(t, "help", "loopback")
	if code != 0 || !strings.HasPrefix(out, "usage: softroce loopback") || strings.Contains(out, "commands:") {
		t.Errorf("help loopback: exit %d:\n%s", code, out)
	}
	if code, _, errs := runCmd(t, "help", "nonesuch"); code != 2 || !strings.Contains(errs, `unknown command "nonesuch"`) {
		t.Errorf("help nonesuch: exit %d, stderr %q", code, errs)
	}
}

// TestLinkFlagDefs: every link flag's help names its argument, so that the
// usage derived from it shows the placeholder; the tool commands take all
// of them but -d, which is the tools' own option.
func TestLinkFlagDefs(t *testing.T) {
	for _, d := range linkFlagDefs {
		if d.arg != "" && !strings.Contains(d.help, d.arg) {
			t.Errorf("--%s: help %q does not name %s", d.name, d.help, d.arg)
		}
		if (toolLinkFlag(d.name) != nil) != (d.name != "d") {
			t.Errorf("--%s: tool flag %v", d.name, toolLinkFlag(d.name) != nil)
		}
	}
	link, rest, err := splitLinkArgs([]string{"-n", "5", "--nodad", "--tap", "t0", "--ip=10.0.0.1/24", "-d", "rxe0", "--mtu", "9000", "srv"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(link, " ") != "--nodad=true --tap=t0 --ip=10.0.0.1/24 --mtu=9000" || strings.Join(rest, " ") != "-n 5 -d rxe0 srv" {
		t.Errorf("split: link %q, rest %q", link, rest)
	}
}
