package childproc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/keelinit/keel/internal/testwait"
)

// TestMain lets the test binary act as the reaping process: "reaper-helper
// MODE" after "--" runs reapScenario in this process and exits.
func TestMain(m *testing.M) {
	if i := slices.Index(os.Args, "--"); i > 0 && len(os.Args) > i+2 && os.Args[i+1] == "reaper-helper" {
		os.Exit(reaperHelper(os.Args[i+2]))
	}
	os.Exit(m.Run())
}

// requireRoot skips a test that needs root, and fails it under CI=true.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root (PID namespaces, PR_SET_CHILD_SUBREAPER)")
		}
		t.Skip("needs root")
	}
}

const (
	orphanShells   = 8  // shells that double-fork
	orphansEach    = 40 // orphans per shell
	trackedN       = 60 // registered children exiting with known statuses
	reapDeadline   = 15 * time.Second
	helperDeadline = 90 * time.Second
)

// reaperHelper runs in a child process: as PID 1 of a new PID namespace
// (mode "pid1") or as an ordinary process (mode "subreaper").
func reaperHelper(mode string) int {
	if mode == "pid1" {
		if os.Getpid() != 1 {
			fmt.Fprintf(os.Stderr, "pid1 helper has pid %d\n", os.Getpid())
			return 2
		}
		// A /proc of this namespace, in a private mount namespace.
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			fmt.Fprintln(os.Stderr, "mount --make-rprivate /:", err)
			return 2
		}
		if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			fmt.Fprintln(os.Stderr, "mount proc:", err)
			return 2
		}
	}
	r, err := StartReaper(nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if r.Subreaper() != (mode == "subreaper") {
		fmt.Fprintf(os.Stderr, "Subreaper() = %v in mode %s\n", r.Subreaper(), mode)
		return 1
	}
	if err := reapScenario(r, mode == "pid1"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("reaped %d orphans\n", r.Reaped())
	return 0
}

// reapScenario runs shells that double-fork orphansEach times while
// registered children exit with known statuses, then checks that every
// registered child got its own status and that every orphan was reaped.
func reapScenario(r *Reaper, wholeNamespace bool) error {
	var wg sync.WaitGroup
	errs := make(chan error, orphanShells+trackedN)
	script := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do ( /bin/sh -c 'exit 7' & ); i=$((i+1)); done`, orphansEach)
	for range orphanShells {
		wg.Go(func() {
			c, err := Start(exec.Command("/bin/sh", "-c", script))
			if err != nil {
				errs <- err
				return
			}
			if st, err := c.State(); err != nil || st.ExitCode() != 0 {
				errs <- fmt.Errorf("double-forking shell: %v %v", st, err)
			}
		})
	}
	for i := range trackedN {
		wg.Go(func() {
			code := i%250 + 1
			argv := []string{"/bin/sh", "-c", fmt.Sprintf("exit %d", code)}
			if i%5 == 0 {
				argv = []string{"/bin/sh", "-c", "kill -9 $$"}
			}
			var out bytes.Buffer
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Stdout, cmd.Stderr = &out, &out
			c, err := Start(cmd)
			if err != nil {
				errs <- err
				return
			}
			st, werr := c.State()
			var ee *exec.ExitError
			switch {
			case st == nil || !errors.As(werr, &ee):
				errs <- fmt.Errorf("child %d (%v): wait: %v (exit status stolen?)", c.Pid, argv, werr)
			case i%5 == 0 && st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL:
				errs <- fmt.Errorf("child %d (%v): %v, want killed by SIGKILL", c.Pid, argv, st)
			case i%5 != 0 && st.ExitCode() != code:
				errs <- fmt.Errorf("child %d (%v): exit code %d, want %d", c.Pid, argv, st.ExitCode(), code)
			}
		})
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if len(all) > 0 {
		return errors.Join(all...)
	}
	// Every orphan is reaped within the deadline.
	want := uint64(orphanShells * orphansEach)
	deadline := time.Now().Add(reapDeadline)
	for {
		z := zombies(wholeNamespace)
		if len(z) == 0 && r.Reaped() >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %d orphans reaped (want %d), zombies left: %v", reapDeadline, r.Reaped(), want, z)
		}
		time.Sleep(10 * time.Millisecond) // polling /proc: there is no event for "no zombie left"
	}
}

// zombies lists zombie processes: all of /proc in a PID namespace of our
// own, else those whose parent is this process.
func zombies(all bool) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		st, ok := readStat(pid)
		if ok && st.state == 'Z' && (all || st.ppid == os.Getpid()) {
			out = append(out, fmt.Sprintf("%d(ppid %d)", pid, st.ppid))
		}
	}
	return out
}

func runHelper(t *testing.T, mode string, attr *syscall.SysProcAttr) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx := testwait.ContextWithin(t, helperDeadline)
	cmd := exec.CommandContext(ctx, exe, "-test.run=^$", "--", "reaper-helper", mode)
	cmd.SysProcAttr = attr
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s helper did not finish within %v:\n%s", mode, helperDeadline, out)
	}
	if err != nil {
		t.Fatalf("%s helper: %v\n%s", mode, err, out)
	}
	t.Logf("%s helper: %s", mode, strings.TrimSpace(string(out)))
}

// TestReapAsPID1 runs the reaper as PID 1 of a fresh PID namespace (as
// "unshare -fp --mount-proc keeld" does): every double-forked orphan is
// reaped, and registered children still get their own exit statuses.
func TestReapAsPID1(t *testing.T) {
	requireRoot(t)
	runHelper(t, "pid1", &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL})
}

// TestReapAsSubreaper runs the reaper in an ordinary process: it makes
// itself a child subreaper, so the orphans come to it and are reaped.
func TestReapAsSubreaper(t *testing.T) {
	runHelper(t, "subreaper", &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL})
}
