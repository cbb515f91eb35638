package notify

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestPassedDescriptorsClosed: the notify socket is writable by every
// local user. Datagrams that carry SCM_RIGHTS (as many descriptors as fit)
// must not leave those descriptors in keeld: each is closed on receipt,
// the datagram is reported, and its fields are still delivered. A flood of
// 300 such datagrams leaves the descriptor count where it was.
func TestPassedDescriptorsClosed(t *testing.T) {
	const datagrams, perDatagram = 300, 16
	path := filepath.Join(t.TempDir(), "n.sock")
	var delivered, reported atomic.Int32
	var lastBad atomic.Value
	s, err := Listen(path, func(m Message) {
		if m.Fields["STATUS"] == "flood" {
			delivered.Add(1)
		}
	}, func(err error) { reported.Add(1); lastBad.Store(err.Error()) })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	before := fds()
	sender, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sender)
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	rights := make([]int, perDatagram)
	for i := range rights {
		rights[i] = int(null.Fd())
	}
	for range datagrams {
		if err := unix.Sendmsg(sender, []byte("STATUS=flood"), unix.UnixRights(rights...), &unix.SockaddrUnix{Name: path}, 0); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for delivered.Load() < datagrams {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d datagrams delivered within 10 s", delivered.Load(), datagrams)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if after := fds(); after > before+2 {
		t.Fatalf("%d descriptors open after %d datagrams with %d descriptors each, %d before", after, datagrams, perDatagram, before)
	}
	if reported.Load() != datagrams {
		t.Errorf("%d datagrams with descriptors reported, want %d", reported.Load(), datagrams)
	}
	if msg, _ := lastBad.Load().(string); !strings.Contains(msg, "file descriptor") {
		t.Errorf("report %q does not say what was dropped", msg)
	}
}
