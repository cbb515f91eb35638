package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
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
	end := time.Now().Add(deadline)
	for {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		if f := strings.Fields(string(b)); len(f) > 0 {
			c, err := strconv.Atoi(f[0])
			if err == nil {
				return c
			}
		}
		if time.Now().After(end) {
			t.Fatalf("no child of pid %d within %v", pid, deadline)
		}
		time.Sleep(5 * time.Millisecond)
	}
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
			const deadline = 20 * time.Second
			end := time.Now().Add(deadline)
			for {
				st := d.status()
				out, _, _ := d.keelctl(nil, "status", "forker")
				done := strings.Contains(out, "forked all") &&
					st["three"].State == "failed" && st["killed"].State == "failed"
				reaped := strings.Count(d.logText(), "reaped orphan pid")
				zombies := zombieChildren(keeld)
				if done && reaped >= orphans && len(zombies) == 0 {
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
					break
				}
				if time.Now().After(end) {
					t.Fatalf("after %v: forker done %v, three %+v, killed %+v, %d orphans reaped (want %d), zombies of keeld (pid %d): %v",
						deadline, strings.Contains(out, "forked all"), st["three"], st["killed"], reaped, orphans, keeld, zombies)
				}
				time.Sleep(20 * time.Millisecond)
			}
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
	rt := t.TempDir()
	pidf := rt + "/grandchild.pid"
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidf); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	root := writeTree(t, map[string]string{
		"etc/defaults/rc.conf": "",
		"etc/rc.conf":          "",
		"bin/holder":           "setsid sleep infinity &\necho $! > " + pidf + "\necho holding\nexec sleep 1000\n",
		"etc/rc.d/holder":      svc("holder", "", "name=holder\ncommand=/bin/sh\ncommand_args=${keel_root}/bin/holder\nstop_timeout=2\n"),
	})
	d := startKeeld(t, root)
	end := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(pidf); err == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatal("holder did not start its grandchild within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	t0 := time.Now()
	if out, errs, code := d.keelctl(nil, "shutdown"); code != 0 {
		t.Fatalf("shutdown: %s %s", out, errs)
	}
	select {
	case <-d.exited:
		t.Logf("keeld exited %v after keelctl shutdown: %v", time.Since(t0).Round(time.Millisecond), d.exitErr)
	case <-time.After(stopTimeout + margin):
		t.Fatalf("keeld still running %v after keelctl shutdown (stop_timeout %v)", stopTimeout+margin, stopTimeout)
	}
}
