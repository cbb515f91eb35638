package api

import (
	"errors"
	"fmt"
	"net"
	"unsafe"

	"golang.org/x/sys/unix"
)

// peerCred reads the credentials the kernel recorded when the peer of c
// connected: SO_PEERCRED (pid, uid, gid) and SO_PEERGROUPS (supplementary
// groups, Linux >= 4.13). Both are fixed at connect(2) time, so they
// describe the process that connected even if it has exited and its pid
// been reused since.
func peerCred(c net.Conn) (Peer, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Peer{}, errors.New("not a unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Peer{}, err
	}
	var cred *unix.Ucred
	var groups []int
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if cerr == nil {
			groups, cerr = peerGroups(int(fd))
		}
	}); err != nil {
		return Peer{}, err
	}
	if cerr != nil {
		return Peer{}, cerr
	}
	return Peer{PID: int(cred.Pid), UID: int(cred.Uid), GID: int(cred.Gid), Groups: groups}, nil
}

// peerGroups reads SO_PEERGROUPS of the socket fd. x/sys has no typed
// getter for it (GetsockoptString stops at the first NUL byte, which every
// gid below 2^24 contains), so it is called directly, growing the buffer
// when the kernel answers ERANGE with the size it needs.
func peerGroups(fd int) ([]int, error) {
	buf := make([]uint32, 64)
	for {
		size := uint32(len(buf) * 4)
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&size)), 0)
		switch {
		case errno == unix.ERANGE && int(size) > len(buf)*4:
			buf = make([]uint32, (size+3)/4)
			continue
		case errno != 0:
			return nil, fmt.Errorf("SO_PEERGROUPS: %w", errno)
		}
		out := make([]int, 0, size/4)
		for _, g := range buf[:size/4] {
			out = append(out, int(g))
		}
		return out, nil
	}
}
