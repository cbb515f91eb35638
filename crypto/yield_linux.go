//go:build linux

package crypto

import "syscall"

// osYield offers the CPU to another runnable thread at the OS level
// (sched_yield). A migration worker calls it between batches of bindings:
// on a machine whose CPUs are all busy, the kernel otherwise lets the
// worker's freshly woken thread run for a whole scheduler slice (1.5 ms
// on a 2-CPU EEVDF kernel) while the data path's thread waits in the run
// queue. runtime.Gosched alone does not help, as it only yields the P.
// syscall.Syscall enters the runtime's syscall state, so the P is handed
// off if the yield takes long.
func osYield() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
