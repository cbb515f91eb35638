// Command keel-gw is a standalone Keel IPsec gateway: a crypto framework
// with the listed providers, the ESP engine configured from a setkey file,
// and the dataplane between a TUN device and the outer socket. It exists for
// the end-to-end tests and bench/tunnel.sh until keeld hosts the dataplane
// (keeld calls dataplane.Start the same way, see run below).
//
// Usage:
//
//	keel-gw [-ctl SOCKET] [-pidfile FILE] [-cpuprofile FILE] VAR=value ...
//
// The arguments are rc.conf assignments: ipsec_file (the setkey file),
// kld_list (crypto providers loaded at start, e.g. "cryptosoft aesni"),
// and the dataplane's ipsec_tun, ipsec_local, ipsec_peer, ipsec_encap,
// ipsec_tun_addr, ipsec_tun_mtu, ipsec_routes, ipsec_natt_port.
//
// Providers are cryptosoft, aesni and virtio (an emulated virtio-crypto
// device in a separate process, package crypto/virtio).
//
// The control socket takes one command per connection and answers with
// one line ("ok", an error, or JSON): "kldload NAME", "kldunload NAME",
// "status" (gateway counters, SAs without keys, providers), "virtio-pid"
// (the virtio device process, for fault tests).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
	"github.com/keelinit/keel/crypto/cryptosoft"
	"github.com/keelinit/keel/crypto/virtio"
	"github.com/keelinit/keel/ipsec"
	"github.com/keelinit/keel/ipsec/dataplane"
	"github.com/keelinit/keel/ipsec/setkey"
)

func main() {
	// The virtio provider's device process may be a re-exec of this binary.
	virtio.RunDeviceIfRequested()
	ctl := flag.String("ctl", "", "control socket path")
	pidfile := flag.String("pidfile", "", "write the PID here once the gateway is up")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile here until exit")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "keel-gw:", err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	vars := map[string]string{}
	for _, a := range flag.Args() {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			fmt.Fprintf(os.Stderr, "keel-gw: argument %q: want VAR=value\n", a)
			os.Exit(2)
		}
		vars[k] = strings.Trim(v, `"'`)
	}
	if err := run(vars, *ctl, *pidfile); err != nil {
		fmt.Fprintln(os.Stderr, "keel-gw:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// provider starts the named provider. virtio starts its device process; when
// the device dies the provider is failed over (ReportFault), deregistered and
// closed, as the virtio module does in keeld.
func provider(ctx context.Context, fw *crypto.Framework, name string) (crypto.Provider, error) {
	switch name {
	case "virtio":
		var mu sync.Mutex
		var self *virtio.Provider
		p, err := virtio.Start(ctx, virtio.Options{OnFault: func(err error) {
			fw.ReportFault(virtio.ModuleName, err)
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			fw.Deregister(dctx, virtio.ModuleName)
			mu.Lock()
			q := self
			mu.Unlock()
			if q != nil {
				q.Close(dctx)
			}
		}})
		if err != nil {
			return nil, err
		}
		mu.Lock()
		self = p
		mu.Unlock()
		virtioMu.Lock()
		virtioProv = p
		virtioMu.Unlock()
		return p, nil
	case "cryptosoft":
		return cryptosoft.New(), nil
	case "aesni":
		if !aesni.Supported() {
			return nil, errors.New("aesni: CPU lacks AES-NI")
		}
		return aesni.New(), nil
	}
	return nil, fmt.Errorf("unknown provider %q (want cryptosoft, aesni or virtio)", name)
}

var (
	virtioMu   sync.Mutex
	virtioProv *virtio.Provider // the last virtio provider started
)

func run(vars map[string]string, ctlPath, pidfile string) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	slog.SetDefault(log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	get := func(k string) string { return vars[k] }

	cfg, err := dataplane.ConfigFromRC(get)
	if err != nil {
		return err
	}
	fw := crypto.New(crypto.Options{Logger: log})
	defer fw.Close(context.Background())
	for _, name := range strings.Fields(get("kld_list")) {
		p, err := provider(ctx, fw, name)
		if err != nil {
			return fmt.Errorf("kld_list: %w", err)
		}
		if err := fw.Register(ctx, p); err != nil {
			return fmt.Errorf("kld_list: %s: %w", name, err)
		}
	}
	eng := ipsec.NewEngine(fw, ipsec.Options{})
	defer eng.Close(context.Background())
	file := get("ipsec_file")
	if file == "" {
		return errors.New("ipsec_file is required")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("ipsec_file: %w", err)
	}
	skc, err := setkey.Parse(file, strings.NewReader(string(data)))
	clear(data)
	if err != nil {
		return err
	}
	if err := eng.Apply(ctx, skc); err != nil {
		return err
	}
	gw, err := dataplane.Start(ctx, eng, cfg)
	if err != nil {
		return err
	}
	defer gw.Close()
	if ctlPath != "" {
		os.Remove(ctlPath)
		l, err := net.Listen("unix", ctlPath)
		if err != nil {
			return fmt.Errorf("control socket: %w", err)
		}
		defer l.Close()
		go serve(ctx, l, fw, eng, gw)
	}
	if pidfile != "" {
		if err := os.WriteFile(pidfile, []byte(fmt.Sprintln(os.Getpid())), 0o644); err != nil {
			return err
		}
	}
	log.Info("gateway up", "if", gw.Status().Interface, "outer", gw.Status().Outer)
	select {
	case <-ctx.Done():
	case <-gw.Done():
	}
	st := gw.Status()
	log.Info("gateway stopping", "out_packets", st.Out.Packets, "in_packets", st.In.Packets,
		"out_drops", st.Out.DropTotal, "in_drops", st.In.DropTotal)
	if st.Err != "" {
		return errors.New(st.Err)
	}
	return nil
}

// Snapshot is the "status" answer of the control socket.
type Snapshot struct {
	Gateway   dataplane.Status
	SAs       []ipsec.SAStatus
	Providers []crypto.ProviderStatus
}

func serve(ctx context.Context, l net.Listener, fw *crypto.Framework, eng *ipsec.Engine, gw *dataplane.Gateway) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(30 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil && line == "" {
				return
			}
			f := strings.Fields(line)
			reply := func(err error) {
				if err != nil {
					fmt.Fprintln(c, "error:", err)
				} else {
					fmt.Fprintln(c, "ok")
				}
			}
			switch {
			case len(f) == 1 && f[0] == "status":
				json.NewEncoder(c).Encode(Snapshot{Gateway: gw.Status(), SAs: eng.SAs(), Providers: fw.Providers()})
			case len(f) == 2 && f[0] == "kldload":
				p, err := provider(ctx, fw, f[1])
				if err == nil {
					err = fw.Register(ctx, p)
				}
				reply(err)
			case len(f) == 1 && f[0] == "virtio-pid":
				virtioMu.Lock()
				p := virtioProv
				virtioMu.Unlock()
				if p == nil {
					reply(errors.New("virtio not loaded"))
				} else {
					fmt.Fprintln(c, p.Pid())
				}
			case len(f) == 2 && f[0] == "kldunload":
				reply(fw.Deregister(ctx, f[1]))
			default:
				reply(fmt.Errorf("unknown command %q", strings.TrimSpace(line)))
			}
		}()
	}
}
