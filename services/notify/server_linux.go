package notify

import (
	"encoding/binary"
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
		// A pidfd of the sender with every datagram (Linux >= 6.5), for
		// Message.SenderAlive; older kernels refuse it and SenderAlive
		// cannot tell.
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSPIDFD, 1)
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
	report := func(err error) {
		if bad != nil {
			bad(err)
		}
	}
	raw, err := s.conn.SyscallConn()
	if err != nil {
		report(err)
		return
	}
	buf := make([]byte, MaxMessage+1)
	// Room for the credentials, the sender's pidfd and some descriptors:
	// the kernel discards (and closes) descriptors that do not fit.
	oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred)*4+unix.CmsgSpace(4))
	for {
		var n, oobn, flags int
		var rerr error
		err := raw.Read(func(fd uintptr) bool {
			// MSG_CMSG_CLOEXEC: a passed descriptor must not leak into a
			// child spawned before it is closed below.
			n, oobn, flags, _, rerr = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC|unix.MSG_DONTWAIT)
			return rerr != unix.EAGAIN
		})
		if err == nil {
			err = rerr
		}
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			report(err)
			continue
		}
		if err := deliver(buf[:n], flags, oob[:oobn], handle, report); err != nil {
			report(err)
		}
	}
}

// deliver hands one datagram (its payload, recvmsg flags and control
// messages) to handle, or returns why not. Descriptors that came with it,
// the sender's pidfd included, are closed when it returns.
func deliver(b []byte, flags int, oob []byte, handle func(Message), report func(error)) error {
	cred, pidfd, passed, err := parseControl(oob)
	if pidfd >= 0 {
		defer unix.Close(pidfd)
	}
	if passed > 0 {
		// sd_notify passes descriptors only with FDSTORE=1, which Keel
		// does not implement; every local user may send here.
		report(fmt.Errorf("notify: %d file descriptors passed by pid %d closed (FDSTORE is not supported)", passed, credPID(cred)))
	}
	if err != nil {
		return err
	}
	if len(b) > MaxMessage || flags&unix.MSG_TRUNC != 0 {
		return fmt.Errorf("notify: datagram larger than %d bytes dropped", MaxMessage)
	}
	fields, err := Parse(b)
	if err != nil {
		return fmt.Errorf("pid %d: %w", cred.Pid, err)
	}
	handle(Message{PID: int(cred.Pid), UID: int(cred.Uid), GID: int(cred.Gid), Fields: fields, pidfd: pidfd, hasPidfd: pidfd >= 0})
	return nil
}

func credPID(c *unix.Ucred) int32 {
	if c == nil {
		return 0
	}
	return c.Pid
}

// parseControl returns the sender's credentials and pidfd (-1 if none)
// from a datagram's control messages, after closing every other
// descriptor passed with it (it returns how many).
func parseControl(oob []byte) (*unix.Ucred, int, int, error) {
	pidfd := -1
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, pidfd, 0, fmt.Errorf("notify: control message: %w", err)
	}
	var cred *unix.Ucred
	var cerr error = ErrNoCredentials
	passed := 0
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET {
			continue
		}
		switch m.Header.Type {
		case unix.SCM_RIGHTS:
			fds, _ := unix.ParseUnixRights(&m)
			for _, fd := range fds {
				_ = unix.Close(fd)
			}
			passed += len(fds)
		case unix.SCM_PIDFD:
			if len(m.Data) >= 4 && pidfd < 0 {
				pidfd = int(int32(binary.NativeEndian.Uint32(m.Data)))
			}
		case unix.SCM_CREDENTIALS:
			if cred == nil {
				cred, cerr = unix.ParseUnixCredentials(&m)
			}
		}
	}
	if cred == nil {
		return nil, pidfd, passed, cerr
	}
	return cred, pidfd, passed, nil
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

// SenderAlive reports whether the process that sent m still exists (a
// zombie counts), so that its pid cannot have been given to another
// process since. Call it after looking the pid up: a sender that exited
// and was reaped may have had its pid reused, and then the lookup found
// someone else. It is valid only while the handler runs, and reports true
// when the kernel does not pass pidfds (Linux < 6.5).
func (m Message) SenderAlive() bool {
	if !m.hasPidfd {
		return true
	}
	return unix.PidfdSendSignal(m.pidfd, 0, nil, 0) == nil
}
