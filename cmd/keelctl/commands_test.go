package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelinit/keel/ipsec"
	"github.com/keelinit/keel/ipsec/espcap"
	"github.com/keelinit/keel/modules"
	"github.com/keelinit/keel/services"
	"github.com/keelinit/keel/services/api"
	"github.com/keelinit/keel/services/builtin"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the current output")

// fakeKeeld serves the control API with fixed answers (no times, so the
// output is stable). down makes the crypto and ipsec views report "not
// running". It records the POSTs it got.
type fakeKeeld struct {
	down  bool
	mu    sync.Mutex
	posts []string
}

func (f *fakeKeeld) handler() http.Handler {
	mux := http.NewServeMux()
	ok := func(v any) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { api.WriteJSON(w, 200, v) }
	}
	statuses := []services.Status{
		{Name: "ipsec", Type: services.TypeBuiltin, State: services.StateRunning, Duration: 1500 * time.Microsecond, StatusText: "4 SA(s)"},
		{Name: "syslogd", Type: services.TypeDaemon, State: services.StateRunning, PID: 4242, Restarts: 2},
		{Name: "ntpd", Type: services.TypeDaemon, State: services.StateStopped, Reason: "stopped by keelctl"},
	}
	detail := func(name string) (services.Detail, bool) {
		for _, s := range statuses {
			if s.Name == name {
				return services.Detail{Status: s, Path: "etc/rc.d/" + name, Provides: []string{name}, Requires: []string{"FILESYSTEMS"},
					Command: []string{"/usr/bin/keeld", name}, Rcvar: name + "_enable", Settings: map[string]string{name + "_enable": "YES"},
					Log: []string{"08:00:00.000 " + name + " up"}}, true
			}
		}
		return services.Detail{}, false
	}
	mods := []modules.Stat{
		{ID: 1, Refs: 2, Name: "crypto", Version: 1, Kind: modules.KindCryptoProvider, State: modules.StateLoaded},
		{ID: 2, Refs: 1, Name: "aesni", Version: 1, Kind: modules.KindCryptoProvider, State: modules.StateLoaded, DependsOn: []string{"crypto"}},
		{ID: 3, Refs: 1, Name: "virtio", Version: 1, Kind: modules.KindCryptoProvider, State: modules.StateFailed, DependsOn: []string{"crypto"},
			Reason: "provider removed by the crypto framework after a fault: virtio: device process exited"},
	}
	mux.HandleFunc("GET /v1/services", ok(statuses))
	mux.HandleFunc("GET /v1/services/{name}", func(w http.ResponseWriter, r *http.Request) {
		d, found := detail(r.PathValue("name"))
		if !found {
			api.WriteError(w, http.StatusNotFound, fmt.Errorf("%s: unknown service", r.PathValue("name")))
			return
		}
		d.Log = d.Log[:min(len(d.Log), api.IntParam(r, "lines", 10))]
		api.WriteJSON(w, 200, d)
	})
	mux.HandleFunc("GET /v1/boot/status", ok(api.BootInfo{Booted: false, Problems: []string{"loop: a requires b requires a"}, PID: 1}))
	post := func(w http.ResponseWriter, r *http.Request, v any) {
		f.mu.Lock()
		f.posts = append(f.posts, r.URL.Path)
		f.mu.Unlock()
		if strings.Contains(r.URL.Path, "denied") {
			api.WriteError(w, http.StatusForbidden, errors.New("uid 4242 may not change state"))
			return
		}
		api.WriteJSON(w, 200, v)
	}
	mux.HandleFunc("POST /v1/services/{name}/{action}", func(w http.ResponseWriter, r *http.Request) {
		d, found := detail(r.PathValue("name"))
		if !found && r.PathValue("name") != "denied" {
			api.WriteError(w, http.StatusNotFound, fmt.Errorf("%s: unknown service", r.PathValue("name")))
			return
		}
		post(w, r, d)
	})
	mux.HandleFunc("POST /v1/reload", func(w http.ResponseWriter, r *http.Request) {
		post(w, r, services.ReloadResult{Restarted: []string{"syslogd"}, Unchanged: 7})
	})
	mux.HandleFunc("POST /v1/shutdown", func(w http.ResponseWriter, r *http.Request) {
		post(w, r, map[string]string{"status": "shutting down"})
	})
	mux.HandleFunc("GET /v1/modules", ok(mods))
	mux.HandleFunc("POST /v1/modules/{op}", func(w http.ResponseWriter, r *http.Request) {
		var req builtin.ModuleRequest
		if err := api.DecodeBody(r, &req); err != nil {
			api.WriteError(w, http.StatusBadRequest, err)
			return
		}
		if slices.Contains(req.Names, "busy") {
			f.mu.Lock()
			f.posts = append(f.posts, r.URL.Path)
			f.mu.Unlock()
			api.WriteError(w, http.StatusConflict, errors.New("modules: unload: busy is busy: crypto: busy in use: removing it would leave 1 binding(s) without a provider: binding 1 aes-gcm-16-128 on busy (ipsec SA esp 192.0.2.1->192.0.2.2 spi 0x1001)"))
			return
		}
		out := append([]modules.Stat(nil), mods...)
		out[1].Name = fmt.Sprintf("%s(force=%v)", strings.Join(req.Names, "+"), req.Force)
		post(w, r, out)
	})
	mux.HandleFunc("GET /v1/crypto", ok(builtin.Crypto{Running: !f.down,
		Providers: []builtin.Provider{
			{Name: "aesni", Kind: "cpu", State: "admitted", SelfTest: "ok", Sessions: 4, RebindsIn: 4,
				Throughput: []builtin.Throughput{{Alg: "aes-gcm-16-128", Size: 1420, MBPerSec: 2048.4}}},
			{Name: "virtio", Kind: "device", Emulated: true, State: "admitted", SelfTest: "ok", Faults: 1,
				Params: map[string]string{"device_pid": "77"}},
		},
		Bindings: []builtin.Binding{{ID: 1, Alg: "aes-gcm-16-128", Provider: "aesni", Submitted: 10, Completed: 9, Retried: 1, Rebinds: 1},
			{ID: 2, Alg: "aes-gcm-16-128", Provider: "", Submitted: 3, Completed: 3, Failed: 3, Rebinds: 1}},
	}))
	ifs := []builtin.Interface{{Name: "keel0", MTU: 1420, Encap: "udp", Outer: "udp:4500", Local: "10.99.0.1", Peer: "10.99.0.2",
		Out: builtin.IfDir{Packets: 12, Bytes: 3400, Drops: map[string]uint64{"no-policy": 1}, DropTotal: 1}, In: builtin.IfDir{Packets: 11, Bytes: 3300}}}
	sas := []builtin.SA{{Src: "10.99.0.1", Dst: "10.99.0.2", SPI: 0x1001, Mode: "tunnel", Alg: "aes-gcm-16", State: "mature", Provider: "aesni", Rebinds: 1,
		OutPackets: 12, OutBytes: 3400, Drops: map[string]uint64{"replay": 2}},
		{Src: "10.99.0.1", Dst: "10.99.0.2", SPI: 0x1003, Mode: "tunnel", Alg: "aes-gcm-16", State: "dead", Expired: "sequence numbers", Provider: "aesni",
			OutPackets: 4294967295, OutBytes: 4294967295000, Drops: map[string]uint64{"sa-expired": 7}}}
	pols := []builtin.Policy{{Index: 0, Dir: "out", Policy: "spdadd 10.98.0.1 10.98.0.2 any -P out ipsec esp/tunnel/10.99.0.1-10.99.0.2/require", Pos: "ipsec.conf:5"}}
	ipsecView := func(v builtin.IPsec) http.HandlerFunc {
		v.Running = !f.down
		return ok(v)
	}
	mux.HandleFunc("GET /v1/ipsec", ipsecView(builtin.IPsec{Interfaces: ifs, SAs: sas, Policies: pols,
		Counters: &ipsec.Counters{OutPackets: 12, InPackets: 11, Bypass: 3}, Pktgen: "off", Drops: map[string]uint64{"replay": 2}}))
	mux.HandleFunc("GET /v1/ipsec/if", ipsecView(builtin.IPsec{Interfaces: ifs}))
	mux.HandleFunc("GET /v1/ipsec/sa", ipsecView(builtin.IPsec{SAs: sas}))
	mux.HandleFunc("GET /v1/ipsec/spd", ipsecView(builtin.IPsec{Policies: pols}))
	mux.HandleFunc("GET /v1/boot", ok(services.Timeline{Finished: 120 * time.Millisecond, Spans: []services.Span{
		{Name: "ipsec", State: services.StateRunning, Start: 20 * time.Millisecond, Ready: 120 * time.Millisecond, Requires: []string{"cryptodev"}},
		{Name: "cryptodev", State: services.StateRunning, Start: 1 * time.Millisecond, Ready: 20 * time.Millisecond},
	}}))
	mux.HandleFunc("GET /v1/graph", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "digraph keel {\n  ipsec -> cryptodev;\n}\n")
	})
	return mux
}

// serve starts f on a unix socket in a temporary directory.
func (f *fakeKeeld) serve(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "keeld.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: f.handler()}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// TestCommands runs every keelctl command against a fake keeld and
// compares stdout, stderr and the exit status with testdata/golden (go
// test -update rewrites it).
func TestCommands(t *testing.T) {
	up, down := &fakeKeeld{}, &fakeKeeld{down: true}
	upSock, downSock := up.serve(t), down.serve(t)
	cases := []struct {
		name string
		down bool
		args []string
		post string // the POST keeld must have seen
		// contains, if set, is checked for in stdout instead of a golden
		// file (for output that is cobra's rather than keelctl's).
		contains string
	}{
		{name: "status", args: []string{"status"}},
		{name: "status-json", args: []string{"--json", "status"}},
		{name: "status-one", args: []string{"status", "ipsec", "-n", "5"}},
		{name: "status-one-json", args: []string{"status", "--json", "syslogd"}},
		{name: "status-inactive", args: []string{"status", "ntpd"}},
		{name: "status-inactive-json", args: []string{"status", "ntpd", "--json"}},
		{name: "status-unknown", args: []string{"status", "nosuch"}},
		{name: "status-too-many", args: []string{"status", "a", "b"}},
		{name: "start", args: []string{"start", "syslogd"}, post: "/v1/services/syslogd/start"},
		{name: "stop-json", args: []string{"--json", "stop", "ntpd"}, post: "/v1/services/ntpd/stop"},
		{name: "restart-unknown", args: []string{"restart", "nosuch"}, post: "-"},
		{name: "restart-denied", args: []string{"restart", "denied"}, post: "/v1/services/denied/restart"},
		{name: "reload-one", args: []string{"reload", "ipsec"}, post: "/v1/services/ipsec/reload"},
		{name: "reload", args: []string{"reload"}, post: "/v1/reload"},
		{name: "reload-json", args: []string{"reload", "--json"}, post: "/v1/reload"},
		{name: "kldstat", args: []string{"kldstat"}},
		{name: "kldstat-json", args: []string{"kldstat", "--json"}},
		{name: "kldload", args: []string{"kldload", "aesni"}, post: "/v1/modules/load"},
		{name: "kldunload-force", args: []string{"kldunload", "-f", "aesni"}, post: "/v1/modules/unload"},
		{name: "kldunload-json", args: []string{"--json", "kldunload", "aesni"}, post: "/v1/modules/unload"},
		{name: "kldunload-two", args: []string{"kldunload", "aesni", "cryptosoft"}, post: "/v1/modules/unload"},
		{name: "kldunload-busy", args: []string{"kldunload", "busy"}, post: "/v1/modules/unload"},
		{name: "kldload-noarg", args: []string{"kldload"}},
		{name: "crypto", args: []string{"crypto"}},
		{name: "crypto-json", args: []string{"crypto", "--json"}},
		{name: "crypto-down", down: true, args: []string{"crypto"}},
		{name: "crypto-down-json", down: true, args: []string{"crypto", "--json"}},
		{name: "ipsec", args: []string{"ipsec"}},
		{name: "ipsec-json", args: []string{"ipsec", "--json"}},
		{name: "ipsec-down", down: true, args: []string{"ipsec"}},
		{name: "ipsec-down-json", down: true, args: []string{"--json", "ipsec"}},
		{name: "ipsec-if", args: []string{"ipsec", "if"}},
		{name: "ipsec-if-down", down: true, args: []string{"ipsec", "if"}},
		{name: "ipsec-sa", args: []string{"ipsec", "sa"}},
		{name: "ipsec-sa-json", args: []string{"ipsec", "sa", "--json"}},
		{name: "ipsec-sa-down", down: true, args: []string{"ipsec", "sa"}},
		{name: "ipsec-spd", args: []string{"ipsec", "spd"}},
		{name: "ipsec-spd-json", args: []string{"ipsec", "spd", "--json"}},
		{name: "ipsec-spd-down", down: true, args: []string{"ipsec", "spd"}},
		{name: "ipsec-spd-down-json", down: true, args: []string{"ipsec", "spd", "--json"}},
		{name: "boot", args: []string{"boot"}},
		{name: "boot-json", args: []string{"boot", "--json"}},
		{name: "boot-plot", args: []string{"boot", "plot"}},
		{name: "boot-plot-json", args: []string{"boot", "plot", "--json"}},
		{name: "boot-critical-chain", args: []string{"boot", "critical-chain"}},
		{name: "boot-critical-chain-json", args: []string{"boot", "critical-chain", "--json"}},
		{name: "graph", args: []string{"graph"}},
		{name: "graph-json", args: []string{"graph", "--json"}},
		{name: "shutdown", args: []string{"shutdown", "--wait", "0"}, post: "/v1/shutdown"},
		{name: "shutdown-json", args: []string{"shutdown", "--wait=0", "--json"}, post: "/v1/shutdown"},
		{name: "complete-status", args: []string{"__complete", "status", ""}},
		{name: "complete-status-second", args: []string{"__complete", "status", "ipsec", ""}},
		{name: "complete-start", args: []string{"__complete", "start", "s"}},
		{name: "complete-commands", args: []string{"__complete", ""}},
		{name: "complete-ipsec", args: []string{"__complete", "ipsec", ""}},
		{name: "completion-bash", args: []string{"completion", "bash"}, contains: "__start_keelctl()"},
		{name: "unknown-command", args: []string{"frobnicate"}},
		{name: "help", args: []string{"--help"}},
		{name: "help-ipsec", args: []string{"ipsec", "--help"}},
		{name: "no-keeld", args: []string{"status"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fk, sock := up, upSock
			if c.down {
				fk, sock = down, downSock
			}
			if c.name == "no-keeld" {
				sock = filepath.Join(t.TempDir(), "none.sock")
			}
			fk.mu.Lock()
			fk.posts = nil
			fk.mu.Unlock()
			var out, errOut bytes.Buffer
			a := &app{out: &out, errOut: &errOut}
			code := a.run(append([]string{"--socket", sock}, c.args...))
			// Independent of the environment and of other packages: the
			// socket paths, and the short help of the esp command that
			// ipsec/espcap provides.
			norm := strings.NewReplacer(sock, "SOCKET", services.DefaultSocket(), "DEFAULT_SOCKET", espcap.NewCommand().Short, "ESP_SHORT")
			got := norm.Replace(fmt.Sprintf("$ keelctl %s\n--- exit %d\n--- stdout\n%s--- stderr\n%s", strings.Join(c.args, " "), code, out.String(), errOut.String()))
			fk.mu.Lock()
			posts := fk.posts
			fk.mu.Unlock()
			if c.post != "" && c.post != "-" && (len(posts) != 1 || posts[0] != c.post) {
				t.Errorf("POSTs %v, want %s", posts, c.post)
			}
			if c.post == "" && len(posts) != 0 {
				t.Errorf("read-only command POSTed %v", posts)
			}
			if c.contains != "" {
				if code != 0 || !strings.Contains(out.String(), c.contains) {
					t.Errorf("exit %d, stdout lacks %q:\n%s%s", code, c.contains, out.String(), errOut.String())
				}
				return
			}
			golden := filepath.Join("testdata", "golden", c.name+".txt")
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("output differs from %s:\n--- got\n%s\n--- want\n%s", golden, got, want)
			}
		})
	}
}
