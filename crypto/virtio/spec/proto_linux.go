package spec

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// Send writes one message with optional file descriptors (SCM_RIGHTS).
func Send(c *net.UnixConn, msg []byte, fds ...int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, oobn, err := c.WriteMsgUnix(msg, oob, nil)
	if err != nil {
		return fmt.Errorf("virtio-crypto: socket send: %w", err)
	}
	if n != len(msg) || oobn != len(oob) {
		return fmt.Errorf("virtio-crypto: socket send: short write")
	}
	return nil
}

// Recv reads one message and any file descriptors passed with it. The
// caller owns the descriptors. io.EOF means the peer closed.
func Recv(c *net.UnixConn, buf []byte) (msg []byte, fds []int, err error) {
	oob := make([]byte, unix.CmsgSpace(4*64))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, nil, err
	}
	if n == 0 && oobn == 0 {
		return nil, nil, errEOF
	}
	if oobn > 0 {
		cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, nil, fmt.Errorf("virtio-crypto: socket control message: %w", err)
		}
		for _, m := range cmsgs {
			f, err := unix.ParseUnixRights(&m)
			if err != nil {
				return nil, nil, fmt.Errorf("virtio-crypto: socket rights: %w", err)
			}
			fds = append(fds, f...)
		}
	}
	return buf[:n], fds, nil
}
