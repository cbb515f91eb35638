package childproc

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// reapBatch bounds the orphans reaped in one hold of spawnMu, so that a
// storm of exiting orphans cannot hold off Start.
const reapBatch = 256

// Reaper reaps the orphaned descendants that the kernel re-parents to
// keeld, which happens to keeld as PID 1 of a PID namespace and as a child
// subreaper. It never reaps a child registered by Start. At most one
// Reaper runs at a time.
type Reaper struct {
	log       *slog.Logger
	subreaper bool
	reaped    atomic.Uint64
	sigs      chan os.Signal
	stop      chan struct{}
	done      chan struct{}
}

var reaperRunning atomic.Bool

// StartReaper starts reaping orphans. When the process is not PID 1 it
// first makes itself a child subreaper (PR_SET_CHILD_SUBREAPER), so that
// orphaned descendants of its services come to it rather than to the
// system's init. Reaped orphans are logged at debug level on log.
func StartReaper(log *slog.Logger) (*Reaper, error) {
	if !reaperRunning.CompareAndSwap(false, true) {
		return nil, errors.New("childproc: a Reaper is already running")
	}
	if log == nil {
		log = slog.Default()
	}
	r := &Reaper{log: log, sigs: make(chan os.Signal, 1), stop: make(chan struct{}), done: make(chan struct{})}
	signal.Notify(r.sigs, syscall.SIGCHLD)
	if os.Getpid() != 1 {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			signal.Stop(r.sigs)
			reaperRunning.Store(false)
			return nil, fmt.Errorf("childproc: prctl(PR_SET_CHILD_SUBREAPER): %w", err)
		}
		r.subreaper = true
	}
	go r.loop()
	return r, nil
}

// Subreaper reports whether the Reaper made the process a child
// subreaper (it is not PID 1).
func (r *Reaper) Subreaper() bool { return r.subreaper }

// Reaped returns how many orphans have been reaped.
func (r *Reaper) Reaped() uint64 { return r.reaped.Load() }

// Close stops reaping and, if StartReaper set it, clears the subreaper
// flag: later orphans go to the next reaper up.
func (r *Reaper) Close() error {
	signal.Stop(r.sigs)
	close(r.stop)
	<-r.done
	var err error
	if r.subreaper {
		if e := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0); e != nil {
			err = fmt.Errorf("childproc: prctl(PR_SET_CHILD_SUBREAPER, 0): %w", e)
		}
	}
	reaperRunning.Store(false)
	return err
}

func (r *Reaper) loop() {
	defer close(r.done)
	for {
		if r.reapOrphans() {
			continue // a full batch: there may be more
		}
		select {
		case <-r.sigs:
		case <-nudge:
		case <-r.stop:
			return
		}
	}
}

// reapOrphans reaps exited children that Start did not register, at most
// reapBatch of them, and reports whether it stopped at that bound.
func (r *Reaper) reapOrphans() bool {
	spawnMu.Lock()
	defer spawnMu.Unlock()
	for range reapBatch {
		pid := peekExited()
		if pid <= 0 {
			return false
		}
		if !registered(pid) {
			r.reap(pid)
			continue
		}
		// The kernel shows this exited child first, and it is keeld's
		// own: its Wait reaps it and then nudges us. The orphans behind it
		// are found through /proc.
		n := 0
		for _, z := range zombieChildren(os.Getpid()) {
			if !registered(z) {
				r.reap(z)
				n++
			}
		}
		return n >= reapBatch
	}
	return true
}

// sigchldPidOffset is the offset of si_pid in siginfo_t: the union after
// si_signo, si_errno and si_code is aligned to a pointer.
const sigchldPidOffset = (3*4 + unsafe.Sizeof(uintptr(0)) - 1) &^ (unsafe.Sizeof(uintptr(0)) - 1)

// peekExited returns the pid of an exited child without reaping it, or 0
// when there is none.
func peekExited() int {
	for {
		var info unix.Siginfo // si_pid stays 0 when no child has exited
		err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0 // ECHILD: no children at all
		}
		return int(*(*int32)(unsafe.Add(unsafe.Pointer(&info), sigchldPidOffset)))
	}
}

func (r *Reaper) reap(pid int) {
	var ws unix.WaitStatus
	for {
		wpid, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || wpid != pid {
			return
		}
		break
	}
	r.reaped.Add(1)
	how := "exited with status " + strconv.Itoa(ws.ExitStatus())
	if ws.Signaled() {
		how = "killed by signal " + unix.SignalName(ws.Signal())
	}
	r.log.Debug("reaped orphan pid " + strconv.Itoa(pid) + ": " + how)
}
