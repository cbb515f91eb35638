package childproc

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"
)

// DefaultWaitDelay is set as exec.Cmd.WaitDelay on commands started with a
// context and no WaitDelay of their own: it bounds how long Wait waits for
// a process to exit after its context is done before it is killed.
const DefaultWaitDelay = 5 * time.Second

// Child is a process started by Start.
type Child struct {
	// Pid is the process id.
	Pid int

	cmd     *exec.Cmd
	exited  chan struct{}
	outDone chan struct{}
	state   *os.ProcessState
	err     error
}

// Start starts cmd and registers its pid so that the Reaper leaves it to
// this Child. A cmd.Stdout or cmd.Stderr that is a Go writer rather than
// an *os.File is fed from a pipe owned by the Child (one pipe when both
// are the same writer, as os/exec does). cmd.Stdin must be nil or an
// *os.File: os/exec's Wait would wait for a Go reader's copy. The caller
// must not call cmd.Wait: the Child waits, and Exited reports the exit.
func Start(cmd *exec.Cmd) (*Child, error) {
	if _, isFile := cmd.Stdin.(*os.File); cmd.Stdin != nil && !isFile {
		return nil, errors.New("childproc: Stdin must be nil or an *os.File")
	}
	c := &Child{cmd: cmd, exited: make(chan struct{}), outDone: make(chan struct{})}
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = DefaultWaitDelay
	}
	var childEnds, parentEnds []*os.File
	var copies []func()
	fail := func(err error) (*Child, error) {
		for _, f := range append(childEnds, parentEnds...) {
			f.Close()
		}
		return nil, err
	}
	pipe := func(w io.Writer) (*os.File, error) {
		r, pw, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		childEnds, parentEnds = append(childEnds, pw), append(parentEnds, r)
		copies = append(copies, func() {
			_, _ = io.Copy(w, r)
			r.Close()
		})
		return pw, nil
	}
	var err error
	stdout, stderr := cmd.Stdout, cmd.Stderr
	if needsPipe(stdout) {
		if cmd.Stdout, err = pipe(stdout); err != nil {
			return fail(err)
		}
	}
	if needsPipe(stderr) {
		if sameWriter(stderr, stdout) {
			cmd.Stderr = cmd.Stdout
		} else if cmd.Stderr, err = pipe(stderr); err != nil {
			return fail(err)
		}
	}
	spawnMu.RLock()
	err = cmd.Start()
	if err == nil {
		c.Pid = cmd.Process.Pid
		register(c)
	}
	spawnMu.RUnlock()
	for _, f := range childEnds {
		f.Close() // the child holds its own copies
	}
	childEnds = nil
	if err != nil {
		return fail(err)
	}
	var wg sync.WaitGroup
	for _, cp := range copies {
		wg.Go(cp)
	}
	go func() {
		wg.Wait()
		close(c.outDone)
	}()
	go c.wait()
	return c, nil
}

func (c *Child) wait() {
	c.err = c.cmd.Wait()
	c.state = c.cmd.ProcessState
	unregister(c)
	close(c.exited)
}

// Exited is closed once the process has exited and been reaped, whatever
// its descendants do with its output.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// State returns the exit state and the error of the wait (an
// *exec.ExitError for a non-zero exit). Valid after Exited is closed.
func (c *Child) State() (*os.ProcessState, error) {
	<-c.exited
	return c.state, c.err
}

// OutputDone is closed when every output pipe of the Child has been
// copied to its end: all writers, descendants included, have closed it.
// It may stay open long after Exited.
func (c *Child) OutputDone() <-chan struct{} { return c.outDone }

func needsPipe(w io.Writer) bool {
	if w == nil {
		return false
	}
	_, isFile := w.(*os.File)
	return !isFile
}

// sameWriter reports whether two writers are the same value, as os/exec
// decides whether stdout and stderr share a pipe; uncomparable dynamic
// types are never the same.
func sameWriter(a, b io.Writer) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}
