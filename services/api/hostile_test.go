package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/keelinit/keel/internal/hostile"
	"github.com/keelinit/keel/services"
)

// These tests run clients as uid 65534 ("nobody" below): the test binary
// is copied where that uid can execute it and re-executed with
// KEEL_API_TEST_HELPER naming what to do; the flood itself is
// internal/hostile's.

const nobody = 65534

func TestMain(m *testing.M) {
	switch h := os.Getenv("KEEL_API_TEST_HELPER"); h {
	case "":
		os.Exit(m.Run())
	case "connect-and-pass":
		os.Exit(passHelper())
	case "request":
		os.Exit(requestHelper())
	case "slow-reader":
		os.Exit(slowReaderHelper())
	default:
		fmt.Fprintln(os.Stderr, "unknown helper", h)
		os.Exit(2)
	}
}

// hostileDir is a directory that uid 65534 can enter (for the socket),
// holding a copy of the test binary that it can execute.
func hostileDir(t *testing.T) (dir, bin string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "keel-api-hostile-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(dir, "api.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, bin
}

// helperAs returns the test binary running helper as uid/gid.
func helperAs(bin, helper string, uid, gid int, env ...string) *exec.Cmd {
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append([]string{"KEEL_API_TEST_HELPER=" + helper}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	return cmd
}

// hostileManager is a Manager over a root with a daemon "d" (sleep) and a
// legacy script "legacy" whose status action appends a line to
// statusRuns, both started.
func hostileManager(t *testing.T) (m *services.Manager, statusRuns string) {
	t.Helper()
	statusRuns = filepath.Join(t.TempDir(), "status-runs")
	m = testManager(t, map[string]string{
		"etc/rc.d/d":      "# PROVIDE: d\n\nname=d\ntype=daemon\ncommand=/bin/sleep\ncommand_args=1000\n",
		"etc/rc.d/legacy": "#!/bin/sh\n# PROVIDE: legacy\nname=legacy\ncase $1 in start) ;; stop) ;; status) echo run >> " + statusRuns + "; echo legacy is fine;; esac\n",
	})
	if err := m.Boot(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m, statusRuns
}

// serveOn serves s on dir/keeld.sock, which belongs to nobody's group,
// until the test ends, and returns the socket's path.
func serveOn(t *testing.T, s *Server, dir string) string {
	t.Helper()
	sock := filepath.Join(dir, "keeld.sock")
	l, err := Listen(sock, nobody)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	t.Cleanup(func() { s.Close(context.Background()) })
	return sock
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestFloodFromReadOnlyUser: uid 65534, a member of the socket group
// only, opens floodConns connections, makes one request on each and keeps
// them open (keep-alive). keeld runs with 512 descriptors, fewer than the
// flood. During the flood root's requests are answered and a daemon is
// restarted (which needs descriptors for /dev/null and its output pipes);
// nobody holds at most its per-uid share of connections, the rest are
// refused with 503, and keeld's descriptors stay bounded.
func TestFloodFromReadOnlyUser(t *testing.T) {
	hostile.RequireRoot(t, "to run clients as uid 65534")
	const floodConns, fdLimit = 600, 512
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: fdLimit, Max: old.Max}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Setrlimit(unix.RLIMIT_NOFILE, &old) })

	dir, bin := hostileDir(t)
	m, _ := hostileManager(t)
	s := NewServer(m, Options{Group: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	lim := s.conns.lim
	if lim.MaxConns != fdLimit/8 {
		t.Fatalf("limits %+v, want MaxConns %d for RLIMIT_NOFILE %d", lim, fdLimit/8, fdLimit)
	}
	sock := serveOn(t, s, dir)
	before, err := m.Detail("d", 1)
	if err != nil || before.PID == 0 {
		t.Fatalf("daemon d not running: %+v %v", before, err)
	}
	fdsBefore := openFDs(t)

	f := hostile.StartFlood(t, sock, floodConns, nobody, nobody)
	served, refused, failed := f.Served, f.Refused, f.Failed
	t.Logf("flood of %d connections: %d served, %d refused with 503, %d failed; limits %+v", floodConns, served, refused, failed, lim)
	if served < 1 || served > lim.MaxConnsPerUID {
		t.Errorf("nobody was served on %d connections at once, want 1..%d", served, lim.MaxConnsPerUID)
	}
	if refused < floodConns-lim.MaxConnsPerUID-failed || refused == 0 {
		t.Errorf("%d connections refused with 503, want the rest of %d", refused, floodConns)
	}
	if st := s.ConnStats(); st.Open > lim.MaxConnsPerUID || st.Refused < uint64(refused) {
		t.Errorf("conn stats %+v during the flood (served %d, refused %d)", st, served, refused)
	}
	if got := gathered(t, s, "keel_control_connections_refused_total"); got < float64(refused) {
		t.Errorf("keel_control_connections_refused_total = %v, want >= %d", got, refused)
	}

	// The flood still holds its connections: root (in another process, as
	// keelctl would be) is served, and a daemon restarts.
	for _, req := range []string{"GET /v1/services", "POST /v1/services/d/restart"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cmd := exec.CommandContext(ctx, bin, "-test.run=^$")
		cmd.Env = []string{"KEEL_API_TEST_HELPER=request", "KEEL_REQUEST_SOCKET=" + sock, "KEEL_REQUEST=" + req}
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil || !strings.HasPrefix(string(out), "200 ") {
			t.Errorf("root's %s during the flood: %v: %s", req, err, out)
		}
	}
	after, err := m.Detail("d", 1)
	if err != nil || after.State != services.StateRunning || after.PID == before.PID || after.PID == 0 {
		t.Fatalf("after restart: %s pid %d (was %d) %v", after.State, after.PID, before.PID, err)
	}
	if fds := openFDs(t); fds > fdsBefore+lim.MaxConnsPerUID+maxDrainers+8 {
		t.Errorf("%d descriptors open during the flood, %d before", fds, fdsBefore)
	}
}

// passHelper connects to KEEL_PASS_SOCKET, hands the connection over
// SCM_RIGHTS on descriptor 3, and exits.
func passHelper() int {
	c, err := net.Dial("unix", os.Getenv("KEEL_PASS_SOCKET"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	f, err := c.(*net.UnixConn).File()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := unix.Sendmsg(3, []byte{1}, unix.UnixRights(int(f.Fd())), nil, 0); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// requestHelper sends KEEL_REQUEST ("METHOD PATH") to KEEL_REQUEST_SOCKET
// and prints the status code and body.
func requestHelper() int {
	method, path, _ := strings.Cut(os.Getenv("KEEL_REQUEST"), " ")
	req, err := http.NewRequest(method, "http://keeld"+path, nil)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	resp, err := NewClient(os.Getenv("KEEL_REQUEST_SOCKET")).http.Do(req)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d %s\n", resp.StatusCode, body)
	return 0
}

// slowReaderHelper sends KEEL_REQUEST on a raw connection to
// KEEL_REQUEST_SOCKET and never reads the answer; it exits when stdin
// closes (at most 20 s).
func slowReaderHelper() int {
	c, err := net.Dial("unix", os.Getenv("KEEL_REQUEST_SOCKET"))
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer c.Close()
	method, path, _ := strings.Cut(os.Getenv("KEEL_REQUEST"), " ")
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: keeld\r\n\r\n", method, path)
	fmt.Println("sent")
	done := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
	}
	return 0
}

// waitFor polls cond (cheaply, every 10 ms) until it holds or the deadline
// passes, and fails then.
func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestConnectionTimeouts: an idle keep-alive connection is closed after
// IdleTimeout; a read-only caller that does not read its (large) answer
// loses the connection after WriteTimeout; a permitted state-changing
// call that takes longer than both ReadTimeout and WriteTimeout still
// completes with its context alive.
func TestConnectionTimeouts(t *testing.T) {
	hostile.RequireRoot(t, "to run clients as uid 65534")
	const short = 300 * time.Millisecond
	dir, bin := hostileDir(t)
	m, _ := hostileManager(t)
	s := NewServer(m, Options{Group: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		IdleTimeout: short, ReadTimeout: short, WriteTimeout: short})
	big := strings.Repeat("x", 64<<20)
	s.Handle("GET /x/big", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, big) }))
	s.Handle("POST /x/slow", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(3 * short):
			WriteJSON(w, 200, "done")
		case <-r.Context().Done():
			WriteError(w, 500, context.Cause(r.Context()))
		}
	}))
	sock := serveOn(t, s, dir)

	// Idle keep-alive connection.
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	fmt.Fprint(c, "GET /v1/boot/status HTTP/1.1\r\nHost: keeld\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("first request: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	t0 := time.Now()
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle keep-alive connection: read %v after %v, want EOF (closed by the server)", err, time.Since(t0))
	}
	t.Logf("idle connection closed after %v (IdleTimeout %v)", time.Since(t0).Round(time.Millisecond), short)

	// A permitted slow call outlives ReadTimeout and WriteTimeout.
	var out string
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := NewClient(sock).Post(ctx, "/x/slow", nil, &out); err != nil || out != "done" {
		t.Errorf("slow privileged call: %q %v", out, err)
	}

	// nobody asks for 64 MiB and reads none of it.
	waitFor(t, "connections closed", 5*time.Second, func() bool { return s.ConnStats().Open == 0 })
	slow := helperAs(bin, "slow-reader", nobody, nobody, "KEEL_REQUEST_SOCKET="+sock, "KEEL_REQUEST=GET /x/big")
	stdin, _ := slow.StdinPipe()
	stdout, _ := slow.StdoutPipe()
	if err := slow.Start(); err != nil {
		t.Fatal(err)
	}
	defer slow.Wait()
	defer stdin.Close()
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "sent\n" {
		t.Fatalf("slow reader: %q", line)
	}
	waitFor(t, "slow reader's connection admitted", 5*time.Second, func() bool { return s.ConnStats().Open == 1 })
	waitFor(t, "slow reader's connection closed by WriteTimeout", 5*time.Second, func() bool { return s.ConnStats().Open == 0 })
}

// TestConnLimiterShares: a table of admissions and releases against a
// limiter of 8 connections, 2 per uid, 3 reserved for root and keeld's
// uid.
func TestConnLimiterShares(t *testing.T) {
	l := newConnLimiter(Limits{MaxConns: 8, MaxConnsPerUID: 2, Reserved: 3}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	l.self = 1000
	steps := []struct {
		uid   int
		admit bool // false: release one of uid's
		want  bool
	}{
		{100, true, true}, {100, true, true}, {100, true, false}, // per-uid share
		{101, true, true}, {101, true, true}, {102, true, true}, // 5 unprivileged: the limit
		{102, true, false}, {103, true, false}, // unprivileged total reached
		{0, true, true}, {1000, true, true}, {0, true, true}, // the reserve
		{0, true, false}, {1000, true, false}, // MaxConns reached
		{100, false, true}, {103, true, true}, {104, true, false}, // 100's slot goes to 103; all full again
		{0, false, true}, {104, true, false}, {0, true, true}, // a free slot is root's only
	}
	for i, st := range steps {
		if !st.admit {
			l.release(st.uid)
			continue
		}
		why := l.admit(st.uid)
		if (why == "") != st.want {
			t.Fatalf("step %d: admit uid %d = %q, want admitted=%v (open %d, unprivileged %d, per uid %v)", i, st.uid, why, st.want, l.open, l.unpri, l.perUID)
		}
	}
}

// TestGroupsFromConnectTime: the supplementary groups that grant the
// right to change state are those of the process that connected, fixed
// at connect time. A client without the control group connects, hands
// the connection on and exits; its pid is then reused (through
// ns_last_pid) by a process that is in the control group. The call made
// on the handed-on connection is refused. (Reading /proc/PID/status at
// request time granted it.)
func TestGroupsFromConnectTime(t *testing.T) {
	hostile.RequireRoot(t, "to run clients as uid 65534")
	const control = 4243
	dir, bin := hostileDir(t)
	m, _ := hostileManager(t)
	s := NewServer(m, Options{Group: control, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	var ran atomic.Int32
	s.Handle("POST /x/change", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran.Add(1); WriteJSON(w, 200, "changed") }))
	sock := serveOn(t, s, dir)

	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "pass-recv"), os.NewFile(uintptr(fds[1]), "pass-send")
	defer mine.Close()
	pass := helperAs(bin, "connect-and-pass", nobody, nobody, "KEEL_PASS_SOCKET="+sock)
	pass.ExtraFiles = []*os.File{theirs}
	err = pass.Run()
	theirs.Close()
	if err != nil {
		t.Fatalf("connect-and-pass helper: %v", err)
	}
	pid := pass.Process.Pid
	buf, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(fds[0], buf, oob, 0)
	if err != nil {
		t.Fatal(err)
	}
	cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(cmsgs) != 1 {
		t.Fatalf("control messages %v %v", cmsgs, err)
	}
	passed, err := unix.ParseUnixRights(&cmsgs[0])
	if err != nil || len(passed) != 1 {
		t.Fatalf("rights %v %v", passed, err)
	}
	cf := os.NewFile(uintptr(passed[0]), "passed")
	conn, err := net.FileConn(cf)
	cf.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	// Reuse the pid for a member of the control group.
	hostile.ReusePID(t, pid, func() (int, func()) {
		c := exec.Command("/bin/sleep", "30")
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{control}}, Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		stop := func() { _ = c.Process.Kill(); _ = c.Wait() }
		t.Cleanup(stop)
		return c.Process.Pid, stop
	})

	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(conn, "POST /x/change HTTP/1.1\r\nHost: keeld\r\nContent-Length: 0\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || ran.Load() != 0 {
		t.Fatalf("call on a connection made without the control group, pid %d now in it: status %d, handler ran %d times; want 403", pid, resp.StatusCode, ran.Load())
	}
}

// TestScriptStatusReadersBounded: a legacy script's detail runs its
// status action as root. 300 concurrent GETs of it by an unprivileged peer
// run the script at most once per services.ScriptStatusTTL (plus the one
// run they may have caught in flight), and all get its answer.
func TestScriptStatusReadersBounded(t *testing.T) {
	const readers = 300
	m, statusRuns := hostileManager(t)
	s := NewServer(m, Options{Group: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx := context.WithValue(context.Background(), peerKey{}, Peer{UID: nobody, GID: nobody, PID: -1})
	t0 := time.Now()
	errs := make(chan error, readers)
	for range readers {
		go func() {
			rec := httptest.NewRecorder()
			s.mux.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, "GET", "/v1/services/legacy", nil))
			var d services.Detail
			if err := json.Unmarshal(rec.Body.Bytes(), &d); err != nil || rec.Code != 200 || d.StatusText != "legacy is fine" {
				errs <- fmt.Errorf("status %d %q: %v", rec.Code, rec.Body, err)
				return
			}
			errs <- nil
		}()
	}
	for range readers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	elapsed := time.Since(t0)
	b, err := os.ReadFile(statusRuns)
	if err != nil {
		t.Fatal(err)
	}
	runs := strings.Count(string(b), "run\n")
	bound := 1 + int(elapsed/services.ScriptStatusTTL) + 1
	t.Logf("%d concurrent GETs in %v ran the status action %d times (bound %d)", readers, elapsed.Round(time.Millisecond), runs, bound)
	if runs < 1 || runs > bound {
		t.Fatalf("%d GETs in %v ran the script %d times, want 1..%d", readers, elapsed, runs, bound)
	}
}

// gathered is the value of the metric named name from s's collector,
// through a pedantic registry (which checks the collector's descriptions).
func gathered(t *testing.T, s *Server, name string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			m := mf.GetMetric()[0]
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestRefusedClientGetsAnswer: a refused connection is answered 503 with
// the reason, and a client whose request comes only after that answer can
// still send it (the connection is half-closed and waits for it) instead
// of getting EPIPE.
func TestRefusedClientGetsAnswer(t *testing.T) {
	m := securityManager(t)
	s := NewServer(m, Options{Group: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Limits: Limits{MaxConns: 1}})
	sock := filepath.Join(t.TempDir(), "keeld.sock")
	l, err := Listen(sock, -1)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	t.Cleanup(func() { s.Close(context.Background()) })
	hold, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	waitFor(t, "first connection admitted", 5*time.Second, func() bool { return s.ConnStats().Open == 1 })

	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "1 connections open (limit 1)") {
		t.Fatalf("refused connection: %d %s", resp.StatusCode, body)
	}
	if _, err := io.WriteString(c, "GET /v1/services HTTP/1.1\r\nHost: keeld\r\n\r\n"); err != nil {
		t.Fatalf("request after the 503: %v", err)
	}
	if s.ConnStats().Refused != 1 {
		t.Errorf("stats %+v", s.ConnStats())
	}
}
