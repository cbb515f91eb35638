package notify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Server receives sd_notify datagrams on a unix socket. Create it with
// Listen; Close stops it. The handler runs on the server's single reader
// goroutine, in arrival order.
type Server struct {
	path string
	conn *net.UnixConn
	wg   sync.WaitGroup
	once sync.Once
}

// Listen binds path (removing a stale socket first), enables SO_PASSCRED
// and calls handle for every well-formed, credentialed datagram. Datagrams
// that are malformed or lack credentials are passed to bad, if non-nil.
func Listen(path string, handle func(Message), bad func(error)) (*Server, error) {
	_ = os.Remove(path)
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("notify: listen %s: %w", path, err)
	}
	// Children may run as other users (e.g. after dropping privileges).
	if err := os.Chmod(path, 0o666); err != nil {
		conn.Close()
		return nil, fmt.Errorf("notify: chmod %s: %w", path, err)
	}
	raw, err := conn.SyscallConn()
	if err != nil {
		conn.Close()
		return nil, err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSCRED, 1)
	}); err != nil || serr != nil {
		conn.Close()
		return nil, fmt.Errorf("notify: SO_PASSCRED: %w", errors.Join(err, serr))
	}
	s := &Server{path: path, conn: conn}
	s.wg.Add(1)
	go s.loop(handle, bad)
	return s, nil
}

// Path is the socket path to put in NOTIFY_SOCKET.
func (s *Server) Path() string { return s.path }

func (s *Server) loop(handle func(Message), bad func(error)) {
	defer s.wg.Done()
	buf := make([]byte, MaxMessage+1)
	oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred)*4)
	for {
		n, oobn, flags, _, err := s.conn.ReadMsgUnix(buf, oob)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if bad != nil {
				bad(err)
			}
			continue
		}
		if n > MaxMessage || flags&unix.MSG_TRUNC != 0 {
			if bad != nil {
				bad(fmt.Errorf("notify: datagram larger than %d bytes dropped", MaxMessage))
			}
			continue
		}
		cred, err := parseCred(oob[:oobn])
		if err != nil {
			if bad != nil {
				bad(err)
			}
			continue
		}
		fields, err := Parse(buf[:n])
		if err != nil {
			if bad != nil {
				bad(fmt.Errorf("pid %d: %w", cred.Pid, err))
			}
			continue
		}
		handle(Message{PID: int(cred.Pid), UID: int(cred.Uid), GID: int(cred.Gid), Fields: fields})
	}
}

func parseCred(oob []byte) (*unix.Ucred, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("notify: control message: %w", err)
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_CREDENTIALS {
			return unix.ParseUnixCredentials(&m)
		}
	}
	return nil, ErrNoCredentials
}

// Close stops the server, waits for the reader goroutine and removes the
// socket. It is idempotent; no handler runs after Close returns.
func (s *Server) Close() error {
	var err error
	s.once.Do(func() {
		err = s.conn.Close()
		s.wg.Wait()
		_ = os.Remove(s.path)
	})
	return err
}

// Send is the client side, for Keel's own daemons: it sends state to the
// socket named by NOTIFY_SOCKET. It returns (false, nil) when the variable
// is unset. The kernel attaches the sender's credentials (SO_PASSCRED on
// the server side makes it do so for unconnected datagrams).
func Send(state string) (bool, error) {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return false, nil
	}
	if path[0] == '@' {
		path = "\x00" + path[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return false, fmt.Errorf("notify: dial: %w", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return false, fmt.Errorf("notify: send: %w", err)
	}
	return true, nil
}
