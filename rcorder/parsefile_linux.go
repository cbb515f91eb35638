package rcorder

import (
	"io"
	"syscall"
)

// parseFile opens, checks and parses one file with four system calls
// (open, fstat, read, close) for a typical rc.d script: ordering ten
// thousand files is dominated by them. O_NONBLOCK keeps open from
// blocking on a FIFO, which fstat then rejects as non-regular. ok
// reports whether the file is a regular file (and so belongs in the
// result, even if reading it failed half-way).
func parseFile(path string) (s Script, ok bool, err error) {
	var fd int
	for {
		fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return Script{}, false, &OpenError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return Script{}, false, &OpenError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return Script{}, false, nil
	}
	s, err = ParseReader(path, fdReader(fd))
	return s, true, err
}

// fdReader reads from a raw file descriptor.
type fdReader int

func (f fdReader) Read(p []byte) (int, error) {
	for {
		n, err := syscall.Read(int(f), p)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return 0, err
		case n == 0 && len(p) > 0:
			return 0, io.EOF
		}
		return n, nil
	}
}
