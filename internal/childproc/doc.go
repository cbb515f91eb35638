// Package childproc starts keeld's child processes and reaps the orphans
// that keeld inherits as an init (PID 1) or as a child subreaper.
//
// Two promises are kept together:
//
//   - Exit is observed from the process wait, never from the I/O wait. A
//     child whose output goes to a Go writer gets a pipe that childproc
//     owns; the copy runs beside the wait, so a descendant that keeps the
//     pipe open (a "setsid daemon &") delays neither the exit notification
//     nor a stop or shutdown. Its output is still copied until the last
//     writer closes the pipe.
//   - Orphans are reaped without stealing an exit status. Go's os/exec
//     waits for each child by its pid, and a plain wait4(-1) loop would
//     race with it and take statuses that belong to keeld's own Wait
//     calls. The Reaper therefore peeks at exited children with
//     waitid(P_ALL, WEXITED|WNOHANG|WNOWAIT), which leaves the zombie in
//     place, and reaps a pid with wait4(pid) only when it is not one of
//     the children registered by Start.
//
// The race between fork and registration (a child that exits before Start
// has recorded its pid) is closed by a lock: Start holds it shared around
// exec.Cmd.Start and the registration, and the Reaper holds it exclusively
// from the peek to the reap, so it never sees a child of keeld's own that
// is not registered yet. A pid is unregistered only after its Wait has
// reaped it, and only by the Child that registered it, so pid reuse cannot
// unregister a newer child. Every process keeld forks must therefore be
// started with Start (services' daemons, rc.d script runs, script status
// queries, the virtio device process); a process started behind its back
// could lose its exit status to the Reaper.
package childproc
