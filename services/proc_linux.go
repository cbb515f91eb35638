package services

import (
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// childAttr puts each child in its own process group (so that stop
// signals reach its children) and kills it if keeld dies.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func killGroup(pid int, sig syscall.Signal) error {
	if pid <= 0 {
		return nil
	}
	if err := syscall.Kill(-pid, sig); err != nil {
		return syscall.Kill(pid, sig)
	}
	return nil
}

func unixSignalName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return strconv.Itoa(int(s))
}
