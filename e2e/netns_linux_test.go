package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// inNamespace runs f on the calling goroutine's thread moved into the
// network namespace ns, then moves the thread back and unlocks it.
//
// The thread must survive: every child the harness starts gets SIGKILL
// when the thread that forked it exits (PR_SET_PDEATHSIG is per thread, see
// dieWithParent), and a goroutine that exits locked to its thread takes
// the thread with it. A helper that entered a namespace on a throwaway
// locked thread killed whichever keeld had been forked from that thread.
// Only if the thread cannot be moved back does it stay locked (and die
// with its goroutine): it must not run other goroutines in ns.
func inNamespace(ns string, f func() error) error {
	runtime.LockOSThread()
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	target, err := os.Open(filepath.Join("/run/netns", ns))
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns %s: %w", ns, err)
	}
	ferr := f()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("setns back from %s: %w (the thread is given up)", ns, err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// TestInNamespaceKeepsThread: a child forked with dieWithParent from a
// thread that then runs inNamespace outlives the goroutine, and the thread
// is back in its own namespace afterwards.
func TestInNamespaceKeepsThread(t *testing.T) {
	requireTools(t, "sleep")
	tp := newTopo(t)
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		c         *exec.Cmd
		inside    string
		back, err error
		after     string
		tid       int
	}
	ch := make(chan res, 1)
	go func() {
		var r res
		defer func() { ch <- r }()
		runtime.LockOSThread()
		r.tid = unix.Gettid()
		defer runtime.UnlockOSThread()
		r.c = exec.Command("sleep", "60")
		dieWithParent(r.c)
		if r.err = r.c.Start(); r.err != nil {
			return
		}
		r.back = inNamespace(tp.a.ns, func() error {
			var err error
			r.inside, err = os.Readlink(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
			return err
		})
		r.after, _ = os.Readlink(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	}()
	var r res
	select {
	case r = <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("inNamespace did not return in 10 s")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer func() { r.c.Process.Kill(); r.c.Wait() }()
	if r.back != nil {
		t.Fatal(r.back)
	}
	if r.inside == self || r.inside == "" {
		t.Errorf("f ran in namespace %q, want %s's (not the test's %s)", r.inside, tp.a.ns, self)
	}
	if r.after != self {
		t.Errorf("thread after inNamespace in %q, want the test's %s", r.after, self)
	}
	// The goroutine has exited; had it taken its thread along, the
	// kernel would now deliver the child's SIGKILL.
	exited := make(chan error, 1)
	go func() { exited <- r.c.Wait() }()
	select {
	case err := <-exited:
		t.Fatalf("child forked from the thread died when the goroutine exited: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", r.tid)); err != nil {
		t.Errorf("the thread that ran inNamespace exited: %v", err)
	}
}
