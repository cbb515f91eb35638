package childproc

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keelinit/keel/internal/testfault"
	"github.com/keelinit/keel/internal/testwait"
)

// heldOutput returns a shell command that leaves a setsid grandchild
// holding its stdout and stderr, writes "main" and "to-stderr" and exits
// with exit; the grandchild only sleeps.
func heldOutput(t *testing.T, exit int) *exec.Cmd {
	t.Helper()
	held, _ := testfault.HeldOutput(t, "60")
	return exec.Command("/bin/sh", "-c", held+"; echo main; echo to-stderr >&2; exit "+strconv.Itoa(exit))
}

// TestExitNotHeldByOutput: a Child's exit is reported at the process exit
// with its status, while a descendant still holds the output pipe; the
// output written so far is delivered, and OutputDone waits for the
// descendant.
func TestExitNotHeldByOutput(t *testing.T) {
	tests := []struct {
		name           string
		sameWriter     bool
		exit           int
		wantOut        string
		wantErrWritten string
	}{
		{"one writer for both", true, 0, "main\nto-stderr\n", ""},
		{"separate writers", false, 4, "main\n", "to-stderr\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := heldOutput(t, tt.exit)
			var out, errw lockedBuffer
			cmd.Stdout, cmd.Stderr = &out, &errw
			if tt.sameWriter {
				cmd.Stderr = &out
			}
			c, err := Start(cmd)
			if err != nil {
				t.Fatal(err)
			}
			testwait.Recv(t, 5*time.Second, "exit reported while a descendant holds the output", c.Exited())
			if st, _ := c.State(); st.ExitCode() != tt.exit {
				t.Errorf("exit code %d, want %d", st.ExitCode(), tt.exit)
			}
			testwait.Until(t, testwait.Timeout, fmt.Sprintf("output %q / %q", tt.wantOut, tt.wantErrWritten), func() bool {
				return string(out.bytes()) == tt.wantOut && string(errw.bytes()) == tt.wantErrWritten
			})
			select {
			case <-c.OutputDone():
				t.Fatal("OutputDone while the grandchild holds the pipe")
			default:
			}
		})
	}
}

// TestOutputReturnsAtExit: Output returns the main process's output at
// its exit, not when a descendant closes the pipe.
func TestOutputReturnsAtExit(t *testing.T) {
	cmd := heldOutput(t, 0)
	var out []byte
	var err error
	testwait.Func(t, 5*time.Second, "Output returning while a descendant holds the pipe", func() { out, err = Output(cmd) })
	if err != nil || string(out) != "main\n" {
		t.Fatalf("Output = %q, %v", out, err)
	}
}

func TestStartRefusesGoStdin(t *testing.T) {
	cmd := exec.Command("/bin/true")
	cmd.Stdin = strings.NewReader("x")
	if _, err := Start(cmd); err == nil || !strings.Contains(err.Error(), "Stdin") {
		t.Fatalf("Start with a Go reader as stdin: %v", err)
	}
}
