package childproc

import (
	"os"
	"strconv"
	"strings"
)

// procStat holds the fields of /proc/PID/stat that keeld uses.
type procStat struct {
	state byte // R, S, D, Z, ...
	ppid  int
}

// readStat parses /proc/PID/stat. The command name (field 2) may hold
// spaces and parentheses, so the fields after it are found from the last
// ')'.
func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 || len(f[0]) != 1 {
		return procStat{}, false
	}
	pp, err := strconv.Atoi(f[1])
	if err != nil {
		return procStat{}, false
	}
	return procStat{state: f[0][0], ppid: pp}, true
}

// ParentPID returns the parent pid of pid as /proc shows it, and false
// when the process is gone or /proc is unreadable.
func ParentPID(pid int) (int, bool) {
	st, ok := readStat(pid)
	return st.ppid, ok
}

// zombieChildren lists the processes in /proc that are zombies whose
// parent is ppid.
func zombieChildren(ppid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok && st.state == 'Z' && st.ppid == ppid {
			out = append(out, pid)
		}
	}
	return out
}
