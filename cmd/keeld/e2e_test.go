package main

// End-to-end tests: they build the real keeld and keelctl binaries, boot
// them on temporary roots and drive them through the control socket.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keelinit/keel/internal/testwait"
	"github.com/keelinit/keel/services"
	"github.com/keelinit/keel/services/builtin"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "keel-e2e-bin-")
	if err != nil {
		panic(err)
	}
	_ = os.Chmod(dir, 0o755)
	binDir = dir
	for _, c := range []string{"keeld", "keelctl"} {
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, c), "github.com/keelinit/keel/cmd/"+c).CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n%s", c, err, out)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// keeldProc is a running keeld under test.
type keeldProc struct {
	t       testing.TB
	cmd     *exec.Cmd
	rt      string
	socket  string
	mu      sync.Mutex
	log     bytes.Buffer
	exited  chan struct{}
	exitErr error
	ready   chan time.Duration
	// readyAfter is the time from exec to READY=1 on NOTIFY_SOCKET.
	readyAfter time.Duration
}

// startKeeld runs keeld with the given root ("" for the embedded
// appliance) and extra flags, acting as systemd: it serves NOTIFY_SOCKET
// and waits for READY=1.
func startKeeld(t testing.TB, root string, extra ...string) *keeldProc {
	t.Helper()
	return startKeeldUnder(t, nil, root, extra...)
}

// startKeeldUnder is startKeeld with keeld run by the wrapper command
// wrap (such as "unshare -fp --mount-proc"); nil runs keeld itself.
func startKeeldUnder(t testing.TB, wrap []string, root string, extra ...string) *keeldProc {
	t.Helper()
	rt, err := os.MkdirTemp("", "keel-e2e-rt-")
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(rt, 0o755)
	t.Cleanup(func() { os.RemoveAll(rt) })
	d := &keeldProc{t: t, rt: rt, socket: filepath.Join(rt, "keeld.sock"), exited: make(chan struct{}), ready: make(chan time.Duration, 1)}
	ns := filepath.Join(rt, "systemd-notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: ns, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	args := append([]string{"--runtime-dir", rt, "--socket", d.socket}, extra...)
	if root != "" {
		args = append(args, "--root", root)
	}
	argv := append(slices.Clone(wrap), filepath.Join(binDir, "keeld"))
	d.cmd = exec.Command(argv[0], append(argv[1:], args...)...)
	d.cmd.Dir = rt // not the repository: no ./etc
	d.cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+ns, "KEEL_LOG_FORMAT=text", "KEEL_STATE_DIR="+rt, "KEEL_NONCE_RECORD="+filepath.Join(rt, "esp-nonces.record"))
	d.cmd.Stdout = &lockedWriter{d: d}
	d.cmd.Stderr = &lockedWriter{d: d}
	t0 := time.Now()
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		d.exitErr = d.cmd.Wait()
		close(d.exited)
	}()
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			if bytes.Contains(buf[:n], []byte("READY=1")) {
				d.ready <- time.Since(t0)
			}
		}
	}()
	t.Cleanup(func() {
		select {
		case <-d.exited:
		default:
			_ = d.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-d.exited:
			case <-time.After(20 * time.Second):
				_ = d.cmd.Process.Kill()
			}
		}
		if t.Failed() {
			t.Logf("keeld log:\n%s", d.logText())
		}
	})
	select {
	case el := <-d.ready:
		d.readyAfter = el
		t.Logf("keeld READY=1 after %v", el)
	case <-d.exited:
		t.Fatalf("keeld exited before READY: %v\n%s", d.exitErr, d.logText())
	case <-time.After(30 * time.Second):
		t.Fatalf("keeld not ready after 30s\n%s", d.logText())
	}
	return d
}

type lockedWriter struct{ d *keeldProc }

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.d.mu.Lock()
	defer w.d.mu.Unlock()
	return w.d.log.Write(p)
}

func (d *keeldProc) logText() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.log.String()
}

// keelctl runs keelctl against d and returns stdout and the exit code.
func (d *keeldProc) keelctl(cred *syscall.Credential, args ...string) (string, string, int) {
	d.t.Helper()
	ctx := testwait.Context(d.t)
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "keelctl"), append([]string{"--socket", d.socket}, args...)...)
	cmd.WaitDelay = time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	err := cmd.Run()
	if ctx.Err() != nil {
		d.t.Fatalf("keelctl %v: no exit within %v: %v", args, testwait.Timeout, err)
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		d.t.Fatalf("keelctl %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

func (d *keeldProc) status() map[string]services.Status {
	d.t.Helper()
	out, errs, code := d.keelctl(nil, "status", "--json")
	if code != 0 {
		d.t.Fatalf("keelctl status: %d %s", code, errs)
	}
	var st []services.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		d.t.Fatal(err)
	}
	m := map[string]services.Status{}
	for _, s := range st {
		m[s.Name] = s
	}
	return m
}

func (d *keeldProc) waitExit(t *testing.T) {
	t.Helper()
	select {
	case <-d.exited:
		if d.exitErr != nil {
			t.Errorf("keeld exit: %v", d.exitErr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("keeld did not exit")
	}
}

func writeTree(t testing.TB, files map[string]string) string {
	t.Helper()
	root, err := os.MkdirTemp("", "keel-e2e-root-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	for p, body := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestDefaultApplianceBootsClean boots the embedded etc/ and checks every
// service came up, the SAs bound to the fastest provider and traffic flows.
func TestDefaultApplianceBootsClean(t *testing.T) {
	d := startKeeld(t, "")
	st := d.status()
	for _, name := range []string{"cryptodev", "kld", "ipsec", "syslogd", "pktgen"} {
		if s := st[name]; s.State != services.StateRunning {
			t.Errorf("%s: %s %q", name, s.State, s.Reason)
		}
	}
	for name, s := range st {
		if !s.State.Active() {
			t.Errorf("%s not active: %s %q", name, s.State, s.Reason)
		}
	}
	if _, _, code := d.keelctl(nil, "status", "ipsec"); code != 0 {
		t.Errorf("status ipsec exit %d", code)
	}
	for _, warn := range []string{"unknown variable", "rcorder: "} {
		if strings.Contains(d.logText(), warn) {
			t.Errorf("the default appliance's boot warns (%q):\n%s", warn, d.logText())
		}
	}
	// Traffic flows and every SA ended on aesni (listed last on purpose).
	deadline := time.Now().Add(10 * time.Second)
	var v builtin.IPsec
	for time.Now().Before(deadline) {
		out, _, _ := d.keelctl(nil, "ipsec", "sa", "--json")
		v = builtin.IPsec{}
		_ = json.Unmarshal([]byte(out), &v)
		moving := len(v.SAs) > 0
		for _, sa := range v.SAs {
			moving = moving && sa.OutPackets+sa.InPackets > 0
		}
		if moving {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(v.SAs) != 4 {
		t.Fatalf("SAs: %+v", v)
	}
	// aesni registers only on CPUs with AES-NI; kld skips it elsewhere.
	want := "cryptosoft"
	if out, _, _ := d.keelctl(nil, "kldstat"); strings.Contains(out, "aesni") {
		want = "aesni"
	}
	for _, sa := range v.SAs {
		if sa.Provider != want || sa.OutPackets+sa.InPackets == 0 || len(sa.Drops) > 0 {
			t.Errorf("SA 0x%x: provider %s out %d in %d drops %v", sa.SPI, sa.Provider, sa.OutPackets, sa.InPackets, sa.Drops)
		}
	}
	out, _, _ := d.keelctl(nil, "ipsec", "sa", "--json")
	if strings.Contains(strings.ToLower(out), "key") || strings.Contains(out, "6b65656c") {
		t.Errorf("ipsec sa output mentions keys:\n%s", out)
	}
	if log := d.logText(); !strings.Contains(log, "bound to "+want) {
		t.Errorf("boot log does not say which provider the SAs bound to")
	}
	svg, _, code := d.keelctl(nil, "boot", "plot")
	if code != 0 || !strings.HasPrefix(svg, "<?xml") || !strings.Contains(svg, "ipsec") {
		t.Errorf("boot plot: %d %.200s", code, svg)
	}
	dot, _, _ := d.keelctl(nil, "graph")
	if !strings.Contains(dot, `"pktgen" -> "ipsec"`) {
		t.Errorf("graph: %s", dot)
	}
	if out, errs, code := d.keelctl(nil, "shutdown"); code != 0 {
		t.Errorf("shutdown: %s %s", out, errs)
	}
	d.waitExit(t)
}

func svc(provide, require, body string) string {
	h := "# PROVIDE: " + provide + "\n"
	if require != "" {
		h += "# REQUIRE: " + require + "\n"
	}
	return h + "\n" + body
}

// TestLifecycle covers failure propagation, crash and restart, reload of
// changed services only, and shutdown order.
func TestLifecycle(t *testing.T) {
	root := writeTree(t, map[string]string{
		"etc/defaults/rc.conf": "b_flags=\"30\"\nc_enable=YES\nmetrics_listen=127.0.0.1:0\n",
		"etc/rc.conf":          "",
		"etc/rc.d/a":           svc("a", "", "name=a\ntype=oneshot\ncommand=/bin/true\n"),
		"etc/rc.d/b":           svc("b", "a", "name=b\ncommand=/bin/sleep\n"),
		"etc/rc.d/b2":          svc("b2", "b", "name=b2\ncommand=/bin/sleep\ncommand_args=30\nrequisite=b\n"),
		"etc/rc.d/c":           svc("c", "a", "name=c\nrcvar=c_enable\ntype=oneshot\ncommand=/bin/sh\ncommand_args=\"-c 'echo bad config >&2; exit 2'\"\n"),
		"etc/rc.d/d":           svc("d", "c", "name=d\ntype=oneshot\ncommand=/bin/true\nrequisite=c\n"),
		"etc/rc.d/f":           svc("f", "c", "name=f\ntype=oneshot\ncommand=/bin/true\n"),
		"etc/rc.d/e":           svc("e", "", "name=e\ncommand=/bin/sh\ncommand_args=\"-c 'sleep 0.2; exit 1'\"\nrestart=on-failure\nrestart_backoff=50ms\n"),
	})
	d := startKeeld(t, root)
	st := d.status()
	want := map[string]services.State{"a": services.StateExited, "b": services.StateRunning, "b2": services.StateRunning,
		"c": services.StateFailed, "d": services.StateBlocked, "f": services.StateExited}
	for n, w := range want {
		if st[n].State != w {
			t.Errorf("%s: %s %q, want %s", n, st[n].State, st[n].Reason, w)
		}
	}
	if st["d"].Reason != "blocked by c" {
		t.Errorf("d reason %q", st["d"].Reason)
	}
	if st["f"].Reason != "started after failed c" {
		t.Errorf("f (REQUIRE c, not requisite) reason %q", st["f"].Reason)
	}
	for name, code := range map[string]int{"b": 0, "c": 3, "d": 3, "nope": 4} {
		if _, _, got := d.keelctl(nil, "status", name); got != code {
			t.Errorf("status %s: exit %d, want %d", name, got, code)
		}
	}
	out, _, _ := d.keelctl(nil, "status", "c")
	if !strings.Contains(out, "bad config") || !strings.Contains(out, "Required by: d f") {
		t.Errorf("status c detail:\n%s", out)
	}
	// Prometheus metrics on metrics_listen.
	if i := strings.Index(d.logText(), "metrics on http://"); i < 0 {
		t.Error("metrics endpoint not started")
	} else {
		u := strings.Fields(d.logText()[i+len("metrics on "):])[0]
		resp, err := (&http.Client{Timeout: testwait.Timeout}).Get(u)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, want := range []string{`keel_service_state{service="c",state="failed",type="oneshot"} 1`, "keel_boot_duration_seconds", "keel_service_restarts_total"} {
			if !strings.Contains(string(body), want) {
				t.Errorf("metrics lack %q", want)
			}
		}
	}
	// Crash and restart with backoff.
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) && d.status()["e"].Restarts < 2 {
		time.Sleep(100 * time.Millisecond)
	}
	if r := d.status()["e"].Restarts; r < 2 {
		t.Errorf("e restarted %d times", r)
	}
	// Reload: only b's settings change.
	pids := d.status()
	if err := os.WriteFile(filepath.Join(root, "etc/rc.conf"), []byte("b_flags=\"40\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errs, code := d.keelctl(nil, "reload", "--json")
	if code != 0 {
		t.Fatalf("reload: %s", errs)
	}
	var res services.ReloadResult
	_ = json.Unmarshal([]byte(out), &res)
	if !slices.Equal(res.Restarted, []string{"b"}) {
		t.Errorf("reload restarted %v, want [b]", res.Restarted)
	}
	after := d.status()
	if after["b"].PID == pids["b"].PID || after["b"].State != services.StateRunning {
		t.Errorf("b not restarted: %+v", after["b"])
	}
	if after["b2"].PID != pids["b2"].PID {
		t.Errorf("b2 restarted though unchanged")
	}
	// SIGHUP reload with no change restarts nothing.
	_ = d.cmd.Process.Signal(syscall.SIGHUP)
	time.Sleep(300 * time.Millisecond)
	if s := d.status()["b"]; s.PID != after["b"].PID {
		t.Errorf("SIGHUP without changes restarted b")
	}
	// Fix c through rc.conf.d and start it by hand; d follows on start.
	if _, _, code := d.keelctl(nil, "stop", "b"); code != 0 {
		t.Errorf("stop b failed")
	}
	if st := d.status(); st["b"].State != services.StateStopped || st["b2"].State != services.StateStopped {
		t.Errorf("stop b: b %s b2 %s", st["b"].State, st["b2"].State)
	}
	if _, _, code := d.keelctl(nil, "start", "b2"); code != 0 {
		t.Errorf("start b2 failed")
	}
	if st := d.status(); st["b"].State != services.StateRunning || st["b2"].State != services.StateRunning {
		t.Errorf("start b2: b %s b2 %s", st["b"].State, st["b2"].State)
	}
	// Shutdown order on SIGTERM: b2 before b before a.
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.waitExit(t)
	order := stopOrder(d.logText())
	pos := func(n string) int { return slices.Index(order, n) }
	if !(pos("b2") >= 0 && pos("b2") < pos("b") && pos("b") < pos("a")) {
		t.Errorf("stop order %v", order)
	}
}

func stopOrder(log string) []string {
	var out []string
	if i := strings.Index(log, "shutdown: stopping"); i >= 0 {
		log = log[i:]
	}
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, ": stopped in "); i > 0 {
			f := strings.Fields(line[:i])
			out = append(out, f[len(f)-1])
		}
	}
	return out
}

// TestAPIPermissions checks SO_PEERCRED authorisation with a real
// unprivileged uid: members of the socket's group may read, only root, the
// keeld uid or the control group may change state.
func TestAPIPermissions(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run keelctl as another uid")
	}
	root := writeTree(t, map[string]string{
		"etc/rc.d/a": svc("a", "", "name=a\ncommand=/bin/sleep\ncommand_args=30\n"),
	})
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	tests := []struct {
		name      string
		flags     []string
		cred      *syscall.Credential
		readCode  int
		writeCode int
	}{
		{"nobody-in-socket-group", []string{"--socket-group", "65534"}, nobody, 0, 4},
		{"nobody-in-control-group", []string{"--socket-group", "65534", "--control-group", "65534"}, nobody, 0, 0},
		{"nobody-outside-socket-group", nil, nobody, 1, 1},
		{"root", nil, nil, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := startKeeld(t, root, tt.flags...)
			if fi, err := os.Stat(d.socket); err != nil || fi.Mode().Perm() != 0o660 {
				t.Fatalf("socket mode: %v %v", fi.Mode(), err)
			}
			if _, errs, code := d.keelctl(tt.cred, "status", "a"); code != tt.readCode {
				t.Errorf("read: exit %d, want %d (%s)", code, tt.readCode, errs)
			}
			_, errs, code := d.keelctl(tt.cred, "restart", "a")
			if code != tt.writeCode {
				t.Errorf("write: exit %d, want %d (%s)", code, tt.writeCode, errs)
			}
			if tt.writeCode == 4 && !strings.Contains(errs, "permission denied") {
				t.Errorf("refusal message: %q", errs)
			}
		})
	}
}

// BenchmarkReady measures keeld's start to READY=1 (sd_notify, as systemd
// sees it) on the embedded default appliance, crypto self-tests and
// calibration included (target <= 150 ms). Reported as the median.
func BenchmarkReady(b *testing.B) {
	var ms []float64
	for b.Loop() {
		d := startKeeld(b, "")
		ms = append(ms, float64(d.readyAfter.Microseconds())/1000)
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		testwait.Recv(b, testwait.Timeout, "keeld exited after SIGTERM", d.exited)
	}
	slices.Sort(ms)
	b.ReportMetric(ms[len(ms)/2], "ms-to-READY")
}

// TestSocketActivation passes keeld a listening control socket the way
// systemd does (fd 3, LISTEN_FDS=1, LISTEN_PID=its pid) and checks keelctl
// reaches keeld through it.
func TestSocketActivation(t *testing.T) {
	root := writeTree(t, map[string]string{
		"etc/rc.d/a": svc("a", "", "name=a\ncommand=/bin/sleep\ncommand_args=30\n"),
	})
	rt, err := os.MkdirTemp("", "keel-e2e-act-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(rt)
	sock := filepath.Join(rt, "activated.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := l.File()
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	defer f.Close()
	// sh's $$ is the pid keeld keeps after exec, as systemd's LISTEN_PID.
	cmd := exec.Command("/bin/sh", "-c", `LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" "$@"`, filepath.Join(binDir, "keeld"),
		"--root", root, "--runtime-dir", rt, "--socket", filepath.Join(rt, "unused.sock"))
	cmd.ExtraFiles = []*os.File{f}
	var log bytes.Buffer
	cmd.Stderr = &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(testwait.Timeout):
			t.Errorf("keeld did not exit within %v of SIGTERM", testwait.Timeout)
			_ = cmd.Process.Kill()
			<-exited // SIGKILL cannot be refused
		}
		if t.Failed() {
			t.Logf("keeld log:\n%s", log.String())
		}
	}()
	d := &keeldProc{t: t, socket: sock}
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, _, code := d.keelctl(nil, "status", "a")
		if code == 0 && strings.Contains(out, "running") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("keelctl through the activated socket: exit %d\n%s", code, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(rt, "unused.sock")); err == nil {
		t.Error("keeld created its own socket despite socket activation")
	}
}
