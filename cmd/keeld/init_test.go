package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keelinit/keel/internal/testfault"
	"github.com/keelinit/keel/internal/testwait"
	"github.com/keelinit/keel/services"
)

// keeld as an init (issue 12, D11): orphans of its services are reaped,
// and its own services' exit statuses still reach their status.

// procStat returns the state and parent pid of pid from /proc.
func procStat(pid int) (state byte, ppid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	if i < 0 || len(f) < 2 {
		return 0, 0, false
	}
	pp, err := strconv.Atoi(f[1])
	return f[0][0], pp, err == nil
}

// zombieChildren lists the zombies whose parent is ppid.
func zombieChildren(ppid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, pp, ok := procStat(pid); ok && st == 'Z' && pp == ppid {
			out = append(out, pid)
		}
	}
	return out
}

// childOf returns the (single) child of pid, waiting for it up to deadline.
func childOf(t *testing.T, pid int, deadline time.Duration) int {
	t.Helper()
	child := 0
	testwait.Until(t, deadline, fmt.Sprintf("a child of pid %d", pid), func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		if f := strings.Fields(string(b)); len(f) > 0 {
			child, _ = strconv.Atoi(f[0])
		}
		return child > 0
	})
	return child
}

func TestReapsOrphans(t *testing.T) {
	const orphans = 100
	forker := fmt.Sprintf("i=0\nwhile [ $i -lt %d ]; do ( /bin/sh -c 'exit 0' & ); i=$((i+1)); sleep 0.01; done\necho forked all\nexec sleep 1000\n", orphans)
	tests := []struct {
		name string
		wrap []string // runs keeld
	}{
		// The reproduction: PID 1 of a fresh PID namespace.
		{"pid1", []string{"unshare", "-fp", "--mount-proc", "--kill-child=SIGTERM"}},
		// An ordinary process: keeld makes itself a child subreaper.
		{"subreaper", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.wrap != nil {
				if os.Geteuid() != 0 {
					if os.Getenv("CI") == "true" {
						t.Fatal("needs root for a PID namespace")
					}
					t.Skip("needs root for a PID namespace")
				}
				if _, err := exec.LookPath(tt.wrap[0]); err != nil {
					t.Fatalf("%s (util-linux) not installed: %v", tt.wrap[0], err)
				}
			}
			root := writeTree(t, map[string]string{
				"etc/defaults/rc.conf": "",
				"etc/rc.conf":          "",
				"bin/forker":           forker,
				"bin/exit3":            "sleep 0.05\nexit 3\n",
				"bin/killed":           "sleep 0.7\nkill -9 $$\n",
				"etc/rc.d/forker":      svc("forker", "", "name=forker\ncommand=/bin/sh\ncommand_args=${keel_root}/bin/forker\n"),
				"etc/rc.d/three":       svc("three", "", "name=three\ncommand=/bin/sh\ncommand_args=${keel_root}/bin/exit3\nrestart=on-failure\nrestart_backoff=1ms\n"),
				"etc/rc.d/killed":      svc("killed", "", "name=killed\ncommand=/bin/sh\ncommand_args=${keel_root}/bin/killed\nrestart=no\n"),
			})
			d := startKeeldUnder(t, tt.wrap, root, "--log-level", "debug")
			keeld := d.cmd.Process.Pid
			if tt.wrap != nil {
				keeld = childOf(t, keeld, 5*time.Second)
			}
			// Every orphan reaped, and the services' own statuses intact.
			var st map[string]services.Status
			var forked bool
			var reaped int
			var zombies []int
			defer func() {
				if t.Failed() {
					t.Logf("forker done %v, three %+v, killed %+v, %d orphans reaped (want %d), zombies of keeld (pid %d): %v",
						forked, st["three"], st["killed"], reaped, orphans, keeld, zombies)
				}
			}()
			testwait.Until(t, 20*time.Second, "every orphan reaped and both failing services failed", func() bool {
				st = d.status()
				out, _, _ := d.keelctl(nil, "status", "forker")
				forked = strings.Contains(out, "forked all")
				reaped = strings.Count(d.logText(), "reaped orphan pid")
				zombies = zombieChildren(keeld)
				return forked && st["three"].State == services.StateFailed && st["killed"].State == services.StateFailed &&
					reaped >= orphans && len(zombies) == 0
			})
			// three exits with 3 eleven times (restart=on-failure,
			// MaxRestartFailures), each time with its own status.
			if r, want := st["three"].Reason, "main process exited with status 3; gave up after 10 restarts"; r != want {
				t.Errorf("three: reason %q, want %q", r, want)
			}
			if n := strings.Count(d.logText(), "three: main process exited with status 3"); n != 11 {
				t.Errorf("three: %d exits with status 3 logged, want 11", n)
			}
			if r := st["killed"].Reason; r != "main process killed by signal SIGKILL" {
				t.Errorf("killed: reason %q, want killed by SIGKILL", r)
			}
			t.Logf("%d orphans reaped", reaped)
			if out, errs, code := d.keelctl(nil, "shutdown"); code != 0 {
				t.Errorf("shutdown: %s %s", out, errs)
			}
			d.waitExit(t)
		})
	}
}

// TestShutdownWithHeldOutput is D4's reproduction on the real binary: a
// daemon leaves a "setsid sleep infinity" grandchild holding its stdout;
// keelctl shutdown must end keeld within the 2 s stop timeout plus a
// margin (it used to take as long as the grandchild lived).
func TestShutdownWithHeldOutput(t *testing.T) {
	const stopTimeout, margin = 2 * time.Second, 3 * time.Second
	held, pidf := testfault.HeldOutput(t, "infinity")
	root := writeTree(t, map[string]string{
		"etc/defaults/rc.conf": "",
		"etc/rc.conf":          "",
		"bin/holder":           held + "\nexec sleep 1000\n",
		"etc/rc.d/holder":      svc("holder", "", "name=holder\ncommand=/bin/sh\ncommand_args=${keel_root}/bin/holder\nstop_timeout=2\n"),
	})
	d := startKeeld(t, root)
	testwait.Until(t, testwait.Timeout, "holder's grandchild started", func() bool {
		_, err := os.Stat(pidf)
		return err == nil
	})
	t0 := time.Now()
	if out, errs, code := d.keelctl(nil, "shutdown"); code != 0 {
		t.Fatalf("shutdown: %s %s", out, errs)
	}
	testwait.Recv(t, stopTimeout+margin, fmt.Sprintf("keeld exit after keelctl shutdown (stop_timeout %v)", stopTimeout), d.exited)
	t.Logf("keeld exited %v after keelctl shutdown: %v", time.Since(t0).Round(time.Millisecond), d.exitErr)
}
