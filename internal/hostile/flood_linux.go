// Package hostile is for tests that play a hostile local user: a flood of
// keep-alive connections to a unix socket from another uid (StartFlood),
// a pid handed to another process (ReusePID), and the root check they
// need (RequireRoot). Only tests import it.
package hostile

import (
	"bufio"
	_ "embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

//go:embed flood.py
var floodScript string

// Python is the interpreter the flood runs under: /usr/bin/python3, which
// .ci/run relies on too (another uid cannot use a python under /root).
const Python = "/usr/bin/python3"

// Flood is a finished flood phase: what the server answered on each
// connection. The connections stay open until Stop.
type Flood struct {
	Served, Refused, Failed int // answered 200, 503, not at all within 10 s
	stdin                   io.Closer
	cmd                     *exec.Cmd
}

// StartFlood opens n connections to the unix socket sock as uid/gid,
// sends one GET /v1/services on each (HTTP/1.1 keep-alive) and returns
// once every connection has an answer or 10 s passed. The connections are
// held until Stop (which t's cleanup calls), at most 30 s. Without root
// or Python the test is skipped, or fails under CI=true.
func StartFlood(t testing.TB, sock string, n, uid, gid int) *Flood {
	t.Helper()
	RequireRoot(t, "to run clients as another uid")
	if _, err := os.Stat(Python); err != nil {
		missing(t, Python)
	}
	cmd := exec.Command(Python, "-c", floodScript, sock, strconv.Itoa(n))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f := &Flood{stdin: stdin, cmd: cmd}
	t.Cleanup(f.Stop)
	report := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		report <- strings.TrimSpace(line)
	}()
	select {
	case line := <-report:
		if _, err := fmt.Sscanf(line, "served=%d refused=%d failed=%d", &f.Served, &f.Refused, &f.Failed); err != nil {
			t.Fatalf("flood said %q: %v", line, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("flood did not report within 30 s")
	}
	return f
}

// Stop closes the flood's connections and waits for it to exit.
func (f *Flood) Stop() {
	if f.stdin != nil {
		_ = f.stdin.Close()
		_ = f.cmd.Wait()
		f.stdin = nil
	}
}
