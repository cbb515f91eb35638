// Command keeld boots a Keel appliance: it reads rc.conf and rc.d from a
// root (the repository's etc/ when run from it, an embedded copy
// otherwise), starts the services in dependency order, supervises them
// and serves the control API that keelctl talks to.
//
//	go run ./cmd/keeld              # boot the default appliance
//	keeld --root / --socket /run/keel/keeld.sock
//
// Settings come from flags, KEEL_* environment variables (KEEL_ROOT,
// KEEL_SOCKET, KEEL_RUNTIME_DIR, KEEL_LOG_FORMAT, KEEL_CALIBRATION_BUDGET,
// KEEL_CONTROL_GROUP) and an optional config file (--config, YAML/TOML/JSON).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"golang.org/x/net/netutil"

	"github.com/keelinit/keel/etc"
	"github.com/keelinit/keel/internal/childproc"
	"github.com/keelinit/keel/services"
	"github.com/keelinit/keel/services/api"
	"github.com/keelinit/keel/services/builtin"
)

// settings are keeld's own settings (not the appliance's, which live in
// rc.conf).
type settings struct {
	Root              string        // host directory holding etc/; "" means auto
	RuntimeDir        string        // sockets, pidfiles, logs
	StateDir          string        // persistent state (the ESP nonce ledger); "" means the builtin's default
	NonceRecord       string        // the nonce ledger's record; "" means the builtin's default
	Socket            string        // control socket
	LogFormat         string        // auto, text, json, journal
	LogLevel          string        // debug, info, warn, error
	CalibrationBudget time.Duration // per crypto provider
	ControlGroup      string        // group allowed to change state
	SocketGroup       string        // group owning the control socket (read access)
}

func main() {
	runVirtioDevice()
	if err := rootCmd(run).Execute(); err != nil {
		if !errors.Is(err, errInvalid) {
			fmt.Fprintln(os.Stderr, "keeld:", err)
		}
		os.Exit(1)
	}
}

// seed returns the rc.conf variables keeld seeds for settings s, its
// executable self and the root's host directory rootDir.
func seed(s settings, self, rootDir string) map[string]string {
	return services.Seed(services.SeedVars{Self: self, RuntimeDir: s.RuntimeDir, Root: rootDir, StateDir: s.StateDir, NonceRecord: s.NonceRecord})
}

// errInvalid is keeld -n's error for a configuration with errors, which
// it has printed.
var errInvalid = errors.New("configuration invalid")

// checkConfig is keeld -n: it validates the configuration that keeld
// would boot with s and prints every finding and a summary to w, like
// sshd -t or nginx -t. It creates, locks and starts nothing (no runtime
// or state directory, socket or ledger), so it runs on a read-only root
// and beside a running keeld.
func checkConfig(w io.Writer, s settings) error {
	root, rootDir, desc, err := resolveRoot(s)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	self, _ := os.Executable()
	rep := builtin.CheckConfig(root, rootDir, desc, seed(s, self, rootDir), log)
	if err := rep.Write(w); err != nil {
		return err
	}
	if rep.Count(services.SeverityError) > 0 {
		return errInvalid
	}
	return nil
}

// rootCmd builds the keeld command; runFn receives the resolved settings.
func rootCmd(runFn func(context.Context, settings) error) *cobra.Command {
	v := viper.New()
	cmd := &cobra.Command{
		Use:           "keeld",
		Short:         "Boot and supervise a Keel appliance",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := loadSettings(v)
			if err != nil {
				return err
			}
			if check, _ := cmd.Flags().GetBool("check"); check {
				return checkConfig(cmd.OutOrStdout(), s)
			}
			return runFn(cmd.Context(), s)
		},
	}
	f := cmd.Flags()
	f.BoolP("check", "n", false, "check the configuration (rc.conf, rc.d, ordering, the builtins' files) and exit: 0 when valid, 1 on errors; starts and creates nothing")
	f.String("config", "", "optional keeld config file (yaml, toml or json)")
	f.String("root", "", "root directory holding etc/ (default: ./etc when it exists, else the embedded appliance)")
	f.String("runtime-dir", "", "runtime directory for sockets, pidfiles and logs (default "+services.DefaultRuntimeDir()+")")
	f.String("state-dir", "", "directory for persistent state such as the ESP nonce ledger (default: <root>/var/db/keel, /var/db/keel as root, else $XDG_STATE_HOME/keel)")
	f.String("nonce-record", "", "file recording which ESP nonce ledger was written last, at which epoch: lets a moved ledger carry over and a lost or rolled-back one be refused; keep it in place when the state directory moves (default: <root>/var/db/keel/esp-nonces.record, /var/db/keel/esp-nonces.record as root, else $XDG_STATE_HOME/keel/esp-nonces.record)")
	f.String("socket", "", "control socket path (default <runtime-dir>/"+services.SocketName+")")
	f.String("log-format", "auto", "log format: auto, text, json or journal")
	f.String("log-level", "info", "log level: debug, info, warn or error")
	f.Duration("calibration-budget", 20*time.Millisecond, "crypto calibration time per provider")
	f.String("control-group", "", "group (name or gid) allowed to change state through the control socket")
	f.String("socket-group", "", "group (name or gid) owning the 0660 control socket, whose members may read status (default: control-group)")
	for _, name := range []string{"root", "runtime-dir", "state-dir", "nonce-record", "socket", "log-format", "log-level", "calibration-budget", "control-group", "socket-group"} {
		_ = v.BindPFlag(name, f.Lookup(name))
	}
	_ = v.BindPFlag("config", f.Lookup("config"))
	v.SetEnvPrefix("KEEL")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	cmd.AddCommand(syslogdCmd())
	return cmd
}

func loadSettings(v *viper.Viper) (settings, error) {
	if cf := v.GetString("config"); cf != "" {
		v.SetConfigFile(cf)
		if err := v.ReadInConfig(); err != nil {
			return settings{}, fmt.Errorf("config %s: %w", cf, err)
		}
	}
	s := settings{
		Root:              v.GetString("root"),
		RuntimeDir:        v.GetString("runtime-dir"),
		StateDir:          v.GetString("state-dir"),
		NonceRecord:       v.GetString("nonce-record"),
		Socket:            v.GetString("socket"),
		LogFormat:         v.GetString("log-format"),
		LogLevel:          v.GetString("log-level"),
		CalibrationBudget: v.GetDuration("calibration-budget"),
		ControlGroup:      v.GetString("control-group"),
		SocketGroup:       v.GetString("socket-group"),
	}
	if s.SocketGroup == "" {
		s.SocketGroup = s.ControlGroup
	}
	if s.RuntimeDir == "" {
		s.RuntimeDir = services.DefaultRuntimeDir()
	}
	if s.Socket == "" {
		s.Socket = filepath.Join(s.RuntimeDir, services.SocketName)
	}
	if s.CalibrationBudget <= 0 {
		return s, fmt.Errorf("calibration-budget must be positive, got %v", s.CalibrationBudget)
	}
	return s, nil
}

// resolveRoot picks the configuration root: --root, else the working
// directory when it holds etc/rc.d (running from the repository), else
// the embedded appliance.
func resolveRoot(s settings) (fsys fs.FS, dir, desc string, err error) {
	if s.Root != "" {
		abs, err := filepath.Abs(s.Root)
		if err != nil {
			return nil, "", "", err
		}
		if _, err := os.Stat(filepath.Join(abs, "etc")); err != nil {
			return nil, "", "", fmt.Errorf("root %s: %w", abs, err)
		}
		return os.DirFS(abs), abs, abs, nil
	}
	if wd, err := os.Getwd(); err == nil {
		if fi, err := os.Stat(filepath.Join(wd, services.RCDir)); err == nil && fi.IsDir() {
			return os.DirFS(wd), wd, wd + " (working directory)", nil
		}
	}
	return etc.Root(), "", "embedded default appliance", nil
}

func controlGID(g string) (int, error) {
	if g == "" {
		return -1, nil
	}
	if g == "none" {
		return -1, nil
	}
	if n, err := strconv.Atoi(g); err == nil {
		return n, nil
	}
	grp, err := user.LookupGroup(g)
	if err != nil {
		return -1, fmt.Errorf("control-group: %w", err)
	}
	return strconv.Atoi(grp.Gid)
}

func run(ctx context.Context, s settings) error {
	t0 := time.Now()
	log, err := newLogger(s.LogFormat, s.LogLevel, t0)
	if err != nil {
		return err
	}
	slog.SetDefault(log)
	sd := newSystemd(log)
	if err := ensureRuntimeDir(s.RuntimeDir); err != nil {
		return err
	}
	// The instance locks come before anything is created in either
	// directory: a refused keeld must leave the running one's sockets
	// and ledger alone.
	rtLock, err := lockDir(s.RuntimeDir, runtimeLockName, "runtime dir")
	if err != nil {
		return err
	}
	defer rtLock.Close()
	gid, err := controlGID(s.ControlGroup)
	if err != nil {
		return err
	}
	sockGID, err := controlGID(s.SocketGroup)
	if err != nil {
		return err
	}
	root, rootDir, desc, err := resolveRoot(s)
	if err != nil {
		return err
	}
	stLock, err := lockStateDir(s.StateDir, rootDir, log)
	if err != nil {
		return err
	}
	defer stLock.Close()
	self, _ := os.Executable()
	log.Info(fmt.Sprintf("keeld %d starting: root %s, runtime %s, uid %d", os.Getpid(), desc, s.RuntimeDir, os.Getuid()))

	// Before anything is spawned: orphans of services are reaped by keeld
	// (as PID 1, or as a child subreaper otherwise).
	reaper, err := childproc.StartReaper(log)
	if err != nil {
		return err
	}
	defer reaper.Close()
	if reaper.Subreaper() {
		log.Info("child subreaper: keeld reaps its services' orphaned descendants")
	} else {
		log.Info("running as PID 1: keeld reaps every orphan")
	}

	sys := newSubsystems(s, log)
	mgr, err := services.New(services.Options{
		Root: root, RootDir: rootDir, RuntimeDir: s.RuntimeDir, Logger: log,
		Seed:        seed(s, self, rootDir),
		Builtins:    sys.Builtins(),
		LoadModules: sys.LoadModules,
		OnProgress: func(done, total int, name string) {
			sd.progress(done, total, name)
		},
	})
	if err != nil {
		return err
	}

	// Control socket: socket-activated when systemd passed one, else ours.
	l, activated, err := controlListener(s.Socket, sockGID)
	if err != nil {
		mgr.Shutdown(context.Background())
		return err
	}
	shutdown := make(chan struct{}, 1)
	srv := api.NewServer(mgr, api.Options{Group: gid, Logger: log, Shutdown: func() {
		select {
		case shutdown <- struct{}{}:
		default:
		}
	}})
	sys.Mount(srv)
	lim := srv.Limits()
	var nofile syscall.Rlimit
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile) // the Go runtime raised the soft limit to the hard one
	log.Info(fmt.Sprintf("control API: at most %d connections, %d per uid, %d kept for root (descriptor limit %d)",
		lim.MaxConns, lim.MaxConnsPerUID, lim.Reserved, nofile.Cur))
	go func() {
		if err := srv.Serve(l); err != nil {
			log.Error("control API: " + err.Error())
		}
	}()
	if activated {
		log.Info("control socket from systemd socket activation")
	} else {
		log.Info("control socket " + s.Socket)
	}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)

	bootDone := make(chan struct{})
	metricsStop := func() {}
	go func() {
		defer close(bootDone)
		bootErr := mgr.Boot(ctx)
		if errors.Is(bootErr, services.ErrShuttingDown) {
			return
		}
		elapsed := time.Since(t0)
		printSummary(log, mgr, sys, elapsed)
		if bootErr != nil {
			log.Warn(bootErr.Error())
		}
		metricsStop = startMetrics(log, mgr, sys, srv, reaper, elapsed)
		sd.ready(summaryLine(mgr, elapsed))
	}()

	for {
		select {
		case <-bootDone:
			bootDone = nil
			continue
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				if bootDone != nil {
					log.Warn("SIGHUP during boot ignored")
					continue
				}
				log.Info("SIGHUP: reloading rc.conf")
				if _, err := mgr.Reload(context.Background()); err != nil {
					log.Error("reload: " + err.Error())
				}
				continue
			}
			log.Info("received " + sig.String() + ": shutting down")
		case <-shutdown:
			log.Info("shutdown requested through the control socket")
		}
		break
	}
	sd.stopping()
	sctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = mgr.Shutdown(sctx)
	if bootDone != nil {
		<-bootDone
	}
	metricsStop()
	if cerr := sys.Close(sctx); cerr != nil { // e.g. the nonce ledger's last write
		log.Error("shutdown: " + cerr.Error())
	}
	_ = srv.Close(sctx)
	return err
}

func controlListener(path string, gid int) (net.Listener, bool, error) {
	if ls := activationListeners(); len(ls) > 0 {
		return ls[0], true, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, false, err
	}
	// The socket is created with mode 0777 &^ umask and only then
	// chmodded to 0660: with a permissive umask, other users could
	// connect in between. Create it with at most 0660 in the first place.
	// (This runs before boot, while nothing else creates files.)
	old := syscall.Umask(0o117)
	l, err := api.Listen(path, gid)
	syscall.Umask(old)
	return l, false, err
}

func summaryLine(m *services.Manager, elapsed time.Duration) string {
	counts := map[services.State]int{}
	for _, st := range m.Status() {
		counts[st.State]++
	}
	return fmt.Sprintf("booted in %v: %d running, %d exited, %d failed, %d blocked, %d disabled",
		elapsed.Round(time.Microsecond*100), counts[services.StateRunning], counts[services.StateExited],
		counts[services.StateFailed], counts[services.StateBlocked], counts[services.StateDisabled])
}

func printSummary(log *slog.Logger, m *services.Manager, sys *subsystems, elapsed time.Duration) {
	for _, line := range sys.Summary() {
		log.Info(line)
	}
	if chain := services.CriticalChain(m.Timeline()); len(chain) > 0 {
		var parts []string
		for _, s := range chain {
			parts = append(parts, fmt.Sprintf("%s@%v", s.Name, s.Ready.Round(time.Microsecond*100)))
		}
		log.Info("critical chain: " + strings.Join(parts, " -> "))
	}
	log.Info(summaryLine(m, elapsed))
}

// startMetrics serves Prometheus metrics on rc.conf's metrics_listen, if
// set. It returns a stop function.
func startMetrics(log *slog.Logger, m *services.Manager, sys *subsystems, srv *api.Server, reaper *childproc.Reaper, boot time.Duration) func() {
	addr := m.Catalog().Chain.Global().Get("metrics_listen")
	if addr == "" {
		return func() {}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(services.NewCollector(m), srv.Collector())
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "keel_orphans_reaped_total",
		Help: "Orphaned processes reaped by keeld as PID 1 or child subreaper."}, func() float64 { return float64(reaper.Reaped()) }))
	for _, c := range sys.Collectors() {
		reg.MustRegister(c)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		log.Error("metrics_listen: " + err.Error())
		return func() {}
	}
	ms := metricsServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	go func() {
		if err := ms.Serve(netutil.LimitListener(l, maxMetricsConns)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics: " + err.Error())
		}
	}()
	log.Info("metrics on http://" + l.Addr().String() + "/metrics")
	return func() { _ = ms.Close() }
}

// maxMetricsConns bounds the metrics listener's open connections (a
// scraper needs one): whoever can reach metrics_listen cannot take
// keeld's descriptors. Further connections wait in the backlog.
const maxMetricsConns = 16

// metricsServer serves h at GET /metrics with every timeout set, so that
// idle, slow or stalled clients give their connection back.
func metricsServer(h http.Handler) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	return &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 16 << 10}
}

// ensureRuntimeDir creates dir (0755) or checks that an existing one is a
// directory owned by us and not writable by others, so that nobody can
// plant sockets or pidfiles in a shared /tmp.
func ensureRuntimeDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("runtime dir: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("runtime dir: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("runtime dir %s: not a directory", dir)
	case ok && int(st.Uid) != os.Geteuid():
		return fmt.Errorf("runtime dir %s: owned by uid %d, not %d", dir, st.Uid, os.Geteuid())
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("runtime dir %s: writable by group or others (%v)", dir, fi.Mode().Perm())
	}
	return nil
}
