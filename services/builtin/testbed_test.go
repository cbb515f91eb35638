package builtin

import (
	"context"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"testing/fstest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keelinit/keel/etc"
	"github.com/keelinit/keel/modules"
	"github.com/keelinit/keel/services"
	"github.com/keelinit/keel/services/api"
)

// appliance returns the embedded default appliance with rc.conf.local
// overrides.
func appliance(t *testing.T, local string) fstest.MapFS {
	t.Helper()
	out := fstest.MapFS{}
	err := fs.WalkDir(etc.Root(), "etc", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(etc.Root(), p)
		out[p] = &fstest.MapFile{Data: b}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	out["etc/rc.conf.local"] = &fstest.MapFile{Data: []byte(local)}
	return out
}

func hasModule(name string) bool {
	for _, m := range modules.Registered() {
		if m.Name == name {
			return true
		}
	}
	return false
}

// testbed is a System and the Manager that runs its builtins on the
// embedded appliance (root, which tests may change before a reload), with
// a discarding logger. t.Cleanup shuts the Manager down, then closes the
// System.
type testbed struct {
	t    *testing.T
	ctx  context.Context
	sys  *System
	m    *services.Manager
	root fstest.MapFS
	rt   string // runtime directory
}

// newTestbed builds a testbed whose rc.conf.local is local and whose
// framework calibrates for budget. gateways, if not nil, replaces the
// ipsec service's dataplane. The Manager is not booted.
func newTestbed(t *testing.T, local string, budget time.Duration, gateways *fakeGateways) *testbed {
	t.Helper()
	return newTestbedLog(t, local, budget, gateways, io.Discard)
}

// newTestbedLog is newTestbed with keeld's log (the System's and the
// Manager's) written to w.
func newTestbedLog(t *testing.T, local string, budget time.Duration, gateways *fakeGateways, w io.Writer) *testbed {
	t.Helper()
	log := slog.New(slog.NewTextHandler(w, nil))
	sys := New(Options{CalibrationBudget: budget, Logger: log})
	if gateways != nil {
		sys.ips.startGW, sys.ips.setRoutes, sys.ips.delRoutes = gateways.start, gateways.setRoutes, gateways.delRoutes
	}
	b := &testbed{t: t, ctx: context.Background(), sys: sys, root: appliance(t, local), rt: t.TempDir()}
	m, err := services.New(services.Options{
		Root: b.root, RuntimeDir: b.rt, Logger: log,
		Seed: map[string]string{"keel_runtime_dir": b.rt, "keel_state_dir": b.rt, "keel_self": "/bin/false",
			recordVar: filepath.Join(b.rt, "esp-nonces.record")},
		Builtins: sys.Builtins(), LoadModules: sys.LoadModules,
	})
	if err != nil {
		t.Fatal(err)
	}
	b.m = m
	t.Cleanup(func() { sys.Close(b.ctx) })
	t.Cleanup(func() { m.Shutdown(b.ctx) })
	return b
}

// status returns the named service's status; the test fails without it.
func (b *testbed) status(name string) services.Status {
	b.t.Helper()
	for _, s := range b.m.Status() {
		if s.Name == name {
			return s
		}
	}
	b.t.Fatalf("no service %s", name)
	return services.Status{}
}

// checkActive reports every service that is neither active nor disabled.
func (b *testbed) checkActive(when string) {
	b.t.Helper()
	for _, s := range b.m.Status() {
		if !s.State.Active() && s.State != services.StateDisabled {
			b.t.Errorf("%s: %s %s %s", when, s.Name, s.State, s.Reason)
		}
	}
}

// serve serves the control API with the builtins' endpoints on a socket
// in the runtime directory and returns a client for it.
func (b *testbed) serve() *api.Client {
	b.t.Helper()
	srv := api.NewServer(b.m, api.Options{Group: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	b.sys.Mount(srv)
	sock := filepath.Join(b.rt, "c.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		b.t.Fatal(err)
	}
	go srv.Serve(l)
	b.t.Cleanup(func() { srv.Close(b.ctx) })
	return api.NewClient(sock)
}

// poll calls cond every 20 ms until it returns true or wait has passed,
// and reports whether it did.
func poll(wait time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(wait); ; time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// gather collects cols into a map from "name,label=value,..." (labels in
// the order Prometheus sorts them) to the counter's or gauge's value.
func gather(t *testing.T, cols ...prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(cols...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			key := mf.GetName()
			for _, lp := range mt.GetLabel() {
				key += "," + lp.GetName() + "=" + lp.GetValue()
			}
			got[key] = mt.GetCounter().GetValue() + mt.GetGauge().GetValue()
		}
	}
	return got
}

// wantMetrics fails the test for every metric of want (keyed as by
// gather) whose value in cols differs.
func wantMetrics(t *testing.T, want map[string]float64, cols ...prometheus.Collector) {
	t.Helper()
	got := gather(t, cols...)
	for key, v := range want {
		if got[key] != v {
			t.Errorf("metric %s = %v, want %v", key, got[key], v)
		}
	}
}
