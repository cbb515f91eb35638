package notify

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    map[string]string
		wantErr bool
	}{
		{"READY=1", map[string]string{"READY": "1"}, false},
		{"READY=1\nSTATUS=up and running\n", map[string]string{"READY": "1", "STATUS": "up and running"}, false},
		{"STATUS=a=b", map[string]string{"STATUS": "a=b"}, false},
		{"", map[string]string{}, false},
		{"garbage", nil, true},
		{"=1", nil, true},
	}
	for _, tt := range tests {
		got, err := Parse([]byte(tt.in))
		if (err != nil) != tt.wantErr {
			t.Errorf("Parse(%q) err = %v", tt.in, err)
			continue
		}
		for k, v := range tt.want {
			if got[k] != v {
				t.Errorf("Parse(%q)[%s] = %q", tt.in, k, got[k])
			}
		}
	}
}

func TestServerCredentials(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n.sock")
	msgs := make(chan Message, 4)
	bad := make(chan error, 4)
	s, err := Listen(path, func(m Message) { msgs <- m }, func(err error) { bad <- err })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t.Setenv("NOTIFY_SOCKET", path)
	if ok, err := Send("READY=1\nSTATUS=hello"); !ok || err != nil {
		t.Fatalf("Send: %v %v", ok, err)
	}
	select {
	case m := <-msgs:
		if m.PID != os.Getpid() || m.UID != os.Getuid() || !m.Ready() || m.Fields["STATUS"] != "hello" {
			t.Errorf("message %+v", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no message")
	}
	// A malformed datagram is reported, not delivered.
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("not a field"))
	c.Write([]byte(strings.Repeat("X=", MaxMessage)))
	c.Close()
	for range 2 {
		select {
		case err := <-bad:
			if err == nil {
				t.Error("nil error")
			}
		case m := <-msgs:
			t.Errorf("malformed message delivered: %+v", m)
		case <-time.After(5 * time.Second):
			t.Fatal("malformed datagram not reported")
		}
	}
	if err := s.Close(); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
	t.Setenv("NOTIFY_SOCKET", "")
	if ok, err := Send("READY=1"); ok || err != nil {
		t.Errorf("Send without socket: %v %v", ok, err)
	}
}
