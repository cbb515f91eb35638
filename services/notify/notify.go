// Package notify implements the server side of the sd_notify protocol
// (sd_notify(3)): a unix datagram socket that children find in
// NOTIFY_SOCKET and to which they send newline-separated KEY=VALUE
// messages such as READY=1 and STATUS=text. Every datagram must carry
// SCM_CREDENTIALS; the server reports the sender's pid, uid and gid as the
// kernel vouches for them, so the caller can check that the sender belongs
// to the service it claims to be.
package notify

import (
	"errors"
	"fmt"
	"strings"
)

// MaxMessage is the largest datagram accepted; longer ones are truncated
// and dropped.
const MaxMessage = 4096

// ErrNoCredentials is returned for a datagram without SCM_CREDENTIALS.
var ErrNoCredentials = errors.New("notify: message without SCM_CREDENTIALS")

// Message is one datagram with the credentials of its sender.
type Message struct {
	PID    int
	UID    int
	GID    int
	Fields map[string]string
	// pidfd is the sender's, open while the handler runs, if hasPidfd
	// (see SenderAlive).
	pidfd    int
	hasPidfd bool
}

// Ready reports READY=1.
func (m Message) Ready() bool { return m.Fields["READY"] == "1" }

// Parse splits a datagram into fields. Lines without '=' are rejected.
func Parse(b []byte) (map[string]string, error) {
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("notify: malformed line %q", truncate(line, 40))
		}
		out[k] = v
	}
	return out, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
