package hostile

import (
	"os"
	"strconv"
	"testing"
)

// ReusePID gives pid, whose process has exited and been reaped, to a new
// process: it sets /proc/sys/kernel/ns_last_pid to pid-1 and calls start,
// which starts a process and returns its pid and how to undo the start,
// until the new process has pid (other processes on the machine may take
// it first; t fails after 1000 tries). It needs root.
func ReusePID(t testing.TB, pid int, start func() (int, func())) {
	t.Helper()
	for range 1000 {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
			t.Fatalf("ns_last_pid: %v", err)
		}
		got, undo := start()
		if got == pid {
			return
		}
		undo()
	}
	t.Fatalf("pid %d not reused in 1000 tries", pid)
}
