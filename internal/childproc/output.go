package childproc

import (
	"bytes"
	"os/exec"
	"sync"
	"time"
)

// OutputGrace is how long Output keeps collecting output after the
// process has exited, while a descendant still holds the pipe open.
const OutputGrace = 100 * time.Millisecond

// Output runs cmd through Start and returns its standard output, as
// exec.Cmd.Output does, but it returns once the process has exited: what
// a descendant still writes is collected for at most OutputGrace. The
// error is the wait's (an *exec.ExitError for a non-zero exit).
func Output(cmd *exec.Cmd) ([]byte, error) {
	var b lockedBuffer
	cmd.Stdout = &b
	c, err := Start(cmd)
	if err != nil {
		return nil, err
	}
	_, werr := c.State()
	t := time.NewTimer(OutputGrace)
	defer t.Stop()
	select {
	case <-c.OutputDone():
	case <-t.C:
	}
	return b.bytes(), werr
}

// lockedBuffer is a bytes.Buffer that can be read while the copy into it
// goes on.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.b.Bytes())
}
