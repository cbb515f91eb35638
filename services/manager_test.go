package services

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keelinit/keel/services/notify"
)

// TestMain lets the test binary act as a daemon for the services under
// test: "helper MODE" after "--" selects the behaviour.
func TestMain(m *testing.M) {
	if i := slices.Index(os.Args, "--"); i > 0 && len(os.Args) > i+2 && os.Args[i+1] == "helper" {
		helper(os.Args[i+2], os.Args[i+3:])
		return
	}
	os.Exit(m.Run())
}

func helper(mode string, args []string) {
	switch mode {
	case "notify": // READY=1 after a short delay, then wait for a signal
		time.Sleep(20 * time.Millisecond)
		if _, err := notify.Send("STATUS=serving\nREADY=1"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		select {}
	case "extend": // asks for more time, then is ready after the original timeout
		_, _ = notify.Send("EXTEND_TIMEOUT_USEC=3000000")
		time.Sleep(600 * time.Millisecond)
		_, _ = notify.Send("READY=1")
		select {}
	case "silent": // never ready
		select {}
	case "pidfile":
		time.Sleep(20 * time.Millisecond)
		_ = os.WriteFile(args[0], []byte(fmt.Sprint(os.Getpid())), 0o644)
		select {}
	case "crash": // run briefly, then fail
		fmt.Println("crashing soon")
		time.Sleep(30 * time.Millisecond)
		os.Exit(3)
	case "spoof": // one STATUS= line, then exit
		if _, err := notify.Send("STATUS=" + args[0]); err != nil {
			os.Exit(2)
		}
		os.Exit(0)
	case "grandchild-notify": // READY=1 sent from a forked child
		// the test binary re-executes itself as "notify" but we only care
		// that a descendant's pid maps back to the service.
		os.Exit(0)
	}
	os.Exit(1)
}

type tree map[string]string

func writeRoot(t *testing.T, files tree) string {
	t.Helper()
	root := t.TempDir()
	for p, body := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasPrefix(body, "#!") {
			mode = 0o755
		}
		if err := os.WriteFile(full, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func newManager(t *testing.T, root string, builtins map[string]Builtin) *Manager {
	t.Helper()
	rt := t.TempDir()
	exe, _ := os.Executable()
	m, err := New(Options{Root: os.DirFS(root), RootDir: root, RuntimeDir: rt, Builtins: builtins,
		Seed:   map[string]string{"self": exe, "rt": rt},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	return m
}

func svc(provide, require, body string) string {
	h := "# PROVIDE: " + provide + "\n"
	if require != "" {
		h += "# REQUIRE: " + require + "\n"
	}
	return h + "\n" + body
}

func states(m *Manager) map[string]Status {
	out := map[string]Status{}
	for _, s := range m.Status() {
		out[s.Name] = s
	}
	return out
}

func TestBootFailurePropagation(t *testing.T) {
	root := writeRoot(t, tree{
		"etc/defaults/rc.conf": "e_enable=NO\nb_enable=NO\n",
		"etc/rc.conf":          "b_enable=YES\n",
		"etc/rc.d/a":           svc("a", "", "name=a\ntype=oneshot\ncommand=/bin/true\n"),
		"etc/rc.d/b":           svc("b", "a", "name=b\nrcvar=b_enable\ncommand=${self}\ncommand_args=\"-- helper notify\"\nnotify=yes\n"),
		"etc/rc.d/c":           svc("c", "b", "name=c\ntype=oneshot\ncommand=/bin/false\n"),
		"etc/rc.d/d":           svc("d", "c", "name=d\ntype=oneshot\ncommand=/bin/true\n"),
		"etc/rc.d/d2":          svc("d2", "d", "name=d2\ntype=oneshot\ncommand=/bin/true\n"),
		"etc/rc.d/d3":          svc("d3", "c", "name=d3\ntype=oneshot\ncommand=/bin/true\nrequisite=c\n"),
		"etc/rc.d/d4":          svc("d4", "d3", "name=d4\ntype=oneshot\ncommand=/bin/true\nrequisite=d3\n"),
		"etc/rc.d/d5":          svc("d5", "d3", "name=d5\ntype=oneshot\ncommand=/bin/true\n"),
		"etc/rc.d/e":           svc("e", "a", "name=e\nrcvar=e_enable\ntype=oneshot\ncommand=/bin/false\n"),
		"etc/rc.d/f":           svc("f", "e", "name=f\ntype=oneshot\ncommand=/bin/true\n"),
		"etc/rc.d/g":           svc("g", "", "name=g\ncommand=/nonexistent/x\ntype=oneshot\n"),
		"etc/rc.d/h":           svc("h", "", "name=h\ncommand=/bin/true\ntype=oneshot\nrequired_files=/etc/missing\n"),
		"etc/rc.d/i":           svc("i", "", "name=i\ncommand=/bin/true\nx=$(id)\n"),
		"etc/rc.d/s":           "#!/bin/sh\n# PROVIDE: s\n# REQUIRE: a\nname=s\ncase $1 in start) echo started;; stop) echo stopped;; status) echo s is fine;; esac\n",
	})
	m := newManager(t, root, nil)
	err := m.Boot(context.Background())
	if err == nil {
		t.Fatal("boot succeeded with failing services")
	}
	st := states(m)
	want := map[string]struct {
		state  State
		reason string
	}{
		"a": {StateExited, ""}, "b": {StateRunning, ""}, "c": {StateFailed, "exited with status 1"},
		// REQUIRE orders, requisite forbids (FreeBSD rc; systemd After= vs Requisite=).
		"d": {StateExited, "started after failed c"}, "d2": {StateExited, ""},
		"d3": {StateBlocked, "blocked by c"}, "d4": {StateBlocked, "blocked by c"},
		"d5": {StateExited, "started after failed d3"},
		"e":  {StateDisabled, `e_enable="NO"`}, "f": {StateExited, ""}, "g": {StateFailed, "no such file"},
		"h": {StateFailed, "required file missing"}, "i": {StateFailed, "i:5:3: command substitution"},
		"s": {StateExited, ""},
	}
	for name, w := range want {
		s := st[name]
		if s.State != w.state || !strings.Contains(s.Reason, w.reason) {
			t.Errorf("%s: %s %q, want %s %q", name, s.State, s.Reason, w.state, w.reason)
		}
	}
	if st["b"].PID == 0 || st["b"].StatusText != "serving" {
		t.Errorf("b: %+v", st["b"])
	}
	tl := m.Timeline()
	spans := map[string]Span{}
	for _, s := range tl.Spans {
		spans[s.Name] = s
	}
	if spans["b"].Start < spans["a"].Ready || spans["c"].Start < spans["b"].Ready {
		t.Errorf("order violated: %+v", tl.Spans)
	}
	if det, err := m.Detail("s", 5); err != nil || det.StatusText != "s is fine" || det.Type != TypeScript {
		t.Errorf("script status: %+v %v", det, err)
	}
	chain := CriticalChain(tl)
	if len(chain) == 0 {
		t.Fatal("empty critical chain")
	}
	det, err := m.Detail("b", 5)
	if err != nil || !slices.Equal(det.Requires, []string{"a"}) || !slices.Equal(det.RequiredBy, []string{"c"}) {
		t.Errorf("detail %+v %v", det, err)
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	order := m.StopOrder()
	if i, j := slices.Index(order, "b"), slices.Index(order, "a"); i < 0 || j < 0 || i > j {
		t.Errorf("stop order %v: b must stop before a", order)
	}
	if s := states(m)["b"]; s.State != StateStopped {
		t.Errorf("b after shutdown: %+v", s)
	}
}

func TestStartTimeoutAndPidfile(t *testing.T) {
	root := writeRoot(t, tree{
		"etc/rc.d/slow":  svc("slow", "", "name=slow\ncommand=${self}\ncommand_args=\"-- helper silent\"\nnotify=yes\nstart_timeout=200ms\n"),
		"etc/rc.d/after": svc("after", "slow", "name=after\ntype=oneshot\ncommand=/bin/true\n"),
		"etc/rc.d/ext":   svc("ext", "", "name=ext\ncommand=${self}\ncommand_args=\"-- helper extend\"\nnotify=yes\nstart_timeout=300ms\n"),
		"etc/rc.d/pf":    svc("pf", "", "name=pf\ncommand=${self}\npidfile=${rt}/pf.pid\ncommand_args=\"-- helper pidfile ${pidfile}\"\n"),
	})
	m := newManager(t, root, nil)
	t0 := time.Now()
	_ = m.Boot(context.Background())
	if el := time.Since(t0); el > 5*time.Second {
		t.Errorf("boot took %v", el)
	}
	st := states(m)
	if st["slow"].State != StateFailed || !strings.Contains(st["slow"].Reason, "start timed out") {
		t.Errorf("slow: %+v", st["slow"])
	}
	if st["after"].State != StateExited || st["after"].Reason != "started after failed slow" {
		t.Errorf("after: %+v", st["after"])
	}
	if st["ext"].State != StateRunning {
		t.Errorf("ext (EXTEND_TIMEOUT_USEC): %+v", st["ext"])
	}
	if st["pf"].State != StateRunning || st["pf"].PID == 0 {
		t.Errorf("pf: %+v", st["pf"])
	}
}

func TestCrashRestart(t *testing.T) {
	root := writeRoot(t, tree{
		"etc/rc.d/c": svc("c", "", "name=c\ncommand=${self}\ncommand_args=\"-- helper crash\"\nrestart=on-failure\nrestart_backoff=20ms\n"),
		"etc/rc.d/n": svc("n", "", "name=n\ncommand=${self}\ncommand_args=\"-- helper crash\"\nrestart=no\n"),
		"etc/rc.d/f": svc("f", "", "name=f\ncommand=/bin/false\nrestart=always\nrestart_backoff=1ms\n"),
	})
	m := newManager(t, root, nil)
	if err := m.Boot(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		st := states(m)
		if st["c"].Restarts >= 2 && st["n"].State == StateFailed && st["f"].State == StateFailed {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	st := states(m)
	if st["c"].Restarts < 2 {
		t.Fatalf("c not restarted: %+v", st["c"])
	}
	if st["n"].State != StateFailed || !strings.Contains(st["n"].Reason, "exited with status 3") {
		t.Errorf("n: %+v", st["n"])
	}
	if f := st["f"]; f.State != StateFailed || f.Restarts != MaxRestartFailures || !strings.Contains(f.Reason, "gave up") {
		t.Errorf("f: %+v", f)
	}
	det, _ := m.Detail("c", 50)
	if !slices.ContainsFunc(det.Log, func(s string) bool { return strings.Contains(s, "crashing soon") }) {
		t.Errorf("child output missing from log: %v", det.Log)
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

type fakeBuiltin struct {
	key           string
	starts, stops int
	failStart     error
}

func (f *fakeBuiltin) Settings(env BuiltinEnv) map[string]string {
	return map[string]string{f.key: env.Config.Get(f.key)}
}
func (f *fakeBuiltin) Start(ctx context.Context, env BuiltinEnv) error {
	f.starts++
	env.Log.Info("starting", "list", env.Config.Get(f.key))
	return f.failStart
}
func (f *fakeBuiltin) Stop(ctx context.Context) error { f.stops++; return nil }
func (f *fakeBuiltin) Status() string                 { return "fake " + f.key }

func TestReloadRestartsOnlyChanged(t *testing.T) {
	root := writeRoot(t, tree{
		"etc/rc.conf":  "kld_list=\"a b\"\nx_flags=10\ny_enable=YES\nz_enable=NO\n",
		"etc/rc.d/kld": svc("kld", "", "name=kld\ntype=builtin\n"),
		"etc/rc.d/x":   svc("x", "kld", "name=x\ncommand=/bin/sleep\ncommand_args=30\n"),
		"etc/rc.d/y":   svc("y", "", "name=y\nrcvar=y_enable\ncommand=/bin/sleep\ncommand_args=30\n"),
		"etc/rc.d/z":   svc("z", "", "name=z\nrcvar=z_enable\ncommand=/bin/sleep\ncommand_args=30\n"),
	})
	kld := &fakeBuiltin{key: "kld_list"}
	m := newManager(t, root, map[string]Builtin{"kld": kld})
	if err := m.Boot(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := states(m)
	if before["kld"].StatusText != "fake kld_list" {
		t.Errorf("builtin status %+v", before["kld"])
	}
	tests := []struct {
		rcconf string
		want   ReloadResult
	}{
		{"kld_list=\"a b\"\nx_flags=20\ny_enable=YES\nz_enable=NO\n", ReloadResult{Restarted: []string{"x"}, Unchanged: 3}},
		{"kld_list=\"a b c\"\nx_flags=20\ny_enable=YES\nz_enable=YES\n", ReloadResult{Restarted: []string{"kld"}, Started: []string{"z"}, Unchanged: 2}},
		{"kld_list=\"a b c\"\nx_flags=20\ny_enable=NO\nz_enable=YES\n", ReloadResult{Stopped: []string{"y"}, Unchanged: 3}},
		{"kld_list=\"a b c\"\nx_flags=20\ny_enable=NO\nz_enable=YES\n", ReloadResult{Unchanged: 4}},
	}
	for i, tt := range tests {
		if err := os.WriteFile(filepath.Join(root, "etc/rc.conf"), []byte(tt.rcconf), 0o644); err != nil {
			t.Fatal(err)
		}
		pidY := states(m)["y"].PID
		res, err := m.Reload(context.Background())
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if fmt.Sprint(res) != fmt.Sprint(tt.want) {
			t.Errorf("%d: reload = %+v, want %+v", i, res, tt.want)
		}
		if i == 0 && states(m)["y"].PID != pidY {
			t.Errorf("unchanged y restarted")
		}
	}
	st := states(m)
	if st["x"].State != StateRunning || st["y"].State != StateDisabled || st["z"].State != StateRunning {
		t.Errorf("states %+v", st)
	}
	if kld.starts != 2 || kld.stops != 1 {
		t.Errorf("kld starts %d stops %d", kld.starts, kld.stops)
	}
	// A broken rc.conf changes nothing.
	os.WriteFile(filepath.Join(root, "etc/rc.conf"), []byte("x_flags=$(reboot)\n"), 0o644)
	if _, err := m.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), "etc/rc.conf:1:9") {
		t.Errorf("reload err = %v", err)
	}
	if states(m)["x"].State != StateRunning {
		t.Error("x stopped by failed reload")
	}
}

func TestManualStartStop(t *testing.T) {
	root := writeRoot(t, tree{
		"etc/rc.d/a": svc("a", "", "name=a\ncommand=/bin/sleep\ncommand_args=30\n"),
		"etc/rc.d/b": svc("b", "a", "name=b\ncommand=/bin/sleep\ncommand_args=30\nrequisite=a\n"),
		"etc/rc.d/o": svc("o", "a", "name=o\ncommand=/bin/sleep\ncommand_args=30\n"),
	})
	m := newManager(t, root, nil)
	if err := m.Boot(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := m.Stop(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	// b is hard-bound to a (requisite) and stops with it; o only
	// REQUIREs a for ordering and stays up.
	if st := states(m); st["a"].State != StateStopped || st["b"].State != StateStopped || st["o"].State != StateRunning {
		t.Fatalf("stop a: %+v", st)
	}
	if err := m.Start(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if st := states(m); st["a"].State != StateRunning || st["b"].State != StateRunning {
		t.Fatalf("start b: %+v", st)
	}
	pid := states(m)["a"].PID
	if err := m.Restart(ctx, "a"); err != nil || states(m)["a"].PID == pid {
		t.Fatalf("restart: %v", err)
	}
	if err := m.Start(ctx, "nope"); !errors.Is(err, ErrUnknownService) {
		t.Errorf("err = %v", err)
	}
}

func TestNotifyOwnership(t *testing.T) {
	root := writeRoot(t, tree{
		// READY=1 comes from a child of the main process (sh).
		"etc/rc.d/gc": svc("gc", "", "name=gc\ncommand=/bin/sh\ncommand_args=\"-c '${self} -- helper notify; exit 0'\"\nnotify=yes\nstart_timeout=5s\n"),
		// READY=1 for this one only ever comes from the test process itself,
		// which belongs to no service: it must be ignored.
		"etc/rc.d/forged": svc("forged", "", "name=forged\ncommand=${self}\ncommand_args=\"-- helper silent\"\nnotify=yes\nstart_timeout=400ms\n"),
	})
	m := newManager(t, root, nil)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: m.notify.Path(), Net: "unixgram"})
		if err != nil {
			return
		}
		defer c.Close()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				_, _ = c.Write([]byte("READY=1\nSTATUS=forged"))
			}
		}
	}()
	_ = m.Boot(context.Background())
	st := states(m)
	if st["gc"].State != StateRunning || st["gc"].StatusText != "serving" {
		t.Errorf("gc: %+v", st["gc"])
	}
	if st["forged"].State != StateFailed || !strings.Contains(st["forged"].Reason, "READY=1") || st["forged"].StatusText == "forged" {
		t.Errorf("forged: %+v", st["forged"])
	}
}

func TestShutdownDuringBoot(t *testing.T) {
	root := writeRoot(t, tree{
		"etc/rc.d/slow":  svc("slow", "", "name=slow\ncommand=${self}\ncommand_args=\"-- helper silent\"\nnotify=yes\nstart_timeout=20s\n"),
		"etc/rc.d/after": svc("after", "slow", "name=after\ntype=oneshot\ncommand=/bin/true\n"),
		"etc/rc.d/fast":  svc("fast", "", "name=fast\ncommand=/bin/sleep\ncommand_args=30\n"),
	})
	m := newManager(t, root, nil)
	done := make(chan error, 1)
	go func() { done <- m.Boot(context.Background()) }()
	time.Sleep(200 * time.Millisecond)
	t0 := time.Now()
	if err := m.Shutdown(context.Background()); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("boot did not return after shutdown")
	}
	if el := time.Since(t0); el > 5*time.Second {
		t.Errorf("shutdown during boot took %v", el)
	}
	for _, s := range m.Status() {
		if s.State == StateRunning || s.State == StateStarting || s.PID != 0 {
			t.Errorf("%s still up: %+v", s.Name, s)
		}
	}
}
