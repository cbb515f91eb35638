package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/keelinit/keel/internal/hostile"
)

// TestFloodKeeld reproduces issue 12's D3 against a real keeld whose
// descriptor limit (512, set with prlimit) is below the flood: uid 65534,
// a member of the socket group only, opens 600 keep-alive connections
// (internal/hostile) and holds them. Meanwhile root's keelctl status and
// restart answer, a daemon killed with SIGKILL is restarted by its
// supervisor (restart=always), and the refusals show in the metrics.
func TestFloodKeeld(t *testing.T) {
	const floodConns, fdLimit = 600, 512
	root := writeTree(t, map[string]string{
		"etc/defaults/rc.conf": "metrics_listen=127.0.0.1:0\n",
		"etc/rc.conf":          "",
		"etc/rc.d/b":           svc("b", "", "name=b\ncommand=/bin/sleep\ncommand_args=1000\n"),
		"etc/rc.d/c":           svc("c", "", "name=c\ncommand=/bin/sleep\ncommand_args=1000\nrestart=always\nrestart_backoff=50ms\n"),
	})
	d := startKeeld(t, root, "--socket-group", "65534")
	if err := unix.Prlimit(d.cmd.Process.Pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: fdLimit, Max: fdLimit}, nil); err != nil {
		t.Fatal(err)
	}
	f := hostile.StartFlood(t, d.socket, floodConns, 65534, 65534)
	served, refused, failed := f.Served, f.Refused, f.Failed
	t.Logf("flood of %d connections as uid 65534: %d served, %d refused (503), %d failed", floodConns, served, refused, failed)
	if served < 1 || served > 16 || refused == 0 {
		t.Errorf("flood: %d served at once (want 1..16, the per-uid share), %d refused", served, refused)
	}

	// nobody's own keelctl is told why.
	if _, errs, code := d.keelctl(&syscall.Credential{Uid: 65534, Gid: 65534}, "status"); code == 0 || !strings.Contains(errs, "uid 65534 has 16 connections open (limit 16 per uid)") {
		t.Errorf("nobody's keelctl status during its own flood: exit %d, %q", code, errs)
	}

	// Root, with a deadline of its own (keelctl's is 2 minutes).
	keelctl := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, filepath.Join(binDir, "keelctl"), append([]string{"--socket", d.socket}, args...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := keelctl("status"); err != nil {
		t.Errorf("root's keelctl status during the flood: %v\n%s", err, out)
	}
	if out, err := keelctl("restart", "b"); err != nil {
		t.Errorf("root's keelctl restart b during the flood: %v\n%s", err, out)
	}
	old := d.status()["c"].PID
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for st := d.status()["c"]; st.PID == old || st.PID == 0 || st.State != "running"; st = d.status()["c"] {
		if time.Now().After(deadline) {
			t.Fatalf("c not restarted within 10 s of SIGKILL during the flood: %s pid %d %q", st.State, st.PID, st.Reason)
		}
		time.Sleep(20 * time.Millisecond)
	}

	m := regexp.MustCompile(`metrics on (http://\S+)`).FindStringSubmatch(d.logText())
	if m == nil {
		t.Fatal("metrics endpoint not started")
	}
	// The metrics listener holds at most maxMetricsConns connections: with
	// that many held idle, a scrape waits; when one closes, it is served.
	addr := strings.TrimSuffix(strings.TrimPrefix(m[1], "http://"), "/metrics")
	var held []net.Conn
	for range maxMetricsConns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	scrape := func(timeout time.Duration) ([]byte, error) {
		resp, err := (&http.Client{Timeout: timeout}).Get(m[1])
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		return io.ReadAll(resp.Body)
	}
	if _, err := scrape(time.Second); err == nil {
		t.Errorf("scrape served with %d metrics connections held, want it to wait", maxMetricsConns)
	}
	got := make(chan error, 1)
	var body []byte
	go func() {
		var err error
		body, err = scrape(10 * time.Second)
		got <- err
	}()
	held[0].Close()
	if err := <-got; err != nil {
		t.Fatalf("scrape after a held connection closed: %v", err)
	}
	for _, c := range held[1:] {
		c.Close()
	}
	r := regexp.MustCompile(`(?m)^keel_control_connections_refused_total (\d+)`).FindStringSubmatch(string(body))
	if r == nil {
		t.Fatalf("metrics lack keel_control_connections_refused_total:\n%s", body)
	}
	if n, _ := strconv.Atoi(r[1]); n < refused {
		t.Errorf("keel_control_connections_refused_total %d, flood saw %d refusals", n, refused)
	}
}
