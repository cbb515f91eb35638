package exchange

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/keelinit/keel/internal/testenv"
)

// This file runs strongSwan's charon in a network namespace with a private
// mount namespace (tmpfs /run, its own /etc/swanctl and STRONGSWAN_CONF),
// kernel-libipsec and no bypass-lan, as issue 16 asks.

const charonBin = "/usr/lib/ipsec/charon"

// requireTool ends the test through internal/testenv (skip, or fail under
// CI=true) unless it runs as root with /dev/net/tun and every tool.
func requireTool(t *testing.T, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root (network and mount namespaces)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		testenv.Missing(t, "no /dev/net/tun (charon's kernel-libipsec needs it)")
	}
	for _, tool := range tools {
		switch tool {
		case charonBin:
			if _, err := os.Stat(charonBin); err != nil {
				testenv.Missing(t, "%s not installed (Debian strongswan-charon libcharon-extra-plugins libstrongswan-extra-plugins)", charonBin)
			}
		case "swanctl":
			testenv.Tool(t, tool, "strongswan-swanctl")
		case "nsenter", "unshare":
			testenv.Tool(t, tool, "util-linux")
		default:
			testenv.Tools(t, tool)
		}
	}
}

var nsSeq atomic.Int64

// netnsPair is two namespaces joined by a veth: Keel's side k (10.97.0.1)
// and charon's side c (10.97.0.2).
type netnsPair struct {
	k, c string
}

func newNetnsPair(t *testing.T) *netnsPair {
	t.Helper()
	id := fmt.Sprintf("keelike-%d-%d-", os.Getpid(), nsSeq.Add(1))
	p := &netnsPair{k: id + "k", c: id + "c"}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("ip", "netns", "add", p.k)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", p.k).Run() })
	run("ip", "netns", "add", p.c)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", p.c).Run() })
	run("ip", "link", "add", "vk", "netns", p.k, "type", "veth", "peer", "name", "vc", "netns", p.c)
	for _, s := range []struct{ ns, dev, addr string }{{p.k, "vk", "10.97.0.1/24"}, {p.c, "vc", "10.97.0.2/24"}} {
		run("ip", "-n", s.ns, "addr", "add", s.addr, "dev", s.dev)
		run("ip", "-n", s.ns, "link", "set", "lo", "up")
		run("ip", "-n", s.ns, "link", "set", s.dev, "up")
	}
	// An address of charon's protected subnet: libipsec routes
	// 10.96.1.0/24 through its TUN with a source address from local_ts.
	// (The kernel here has no dummy interfaces.)
	run("ip", "-n", p.c, "addr", "add", "10.96.2.1/32", "dev", "lo")
	return p
}

// inNetns runs f on a thread switched into namespace ns; sockets f opens
// stay in ns.
func inNetns(t *testing.T, ns string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			t.Error(err)
			return
		}
		defer orig.Close()
		target, err := os.Open("/run/netns/" + ns)
		if err != nil {
			t.Error(err)
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			t.Error(err)
			return
		}
		f()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			// The thread stays locked and dies with the goroutine.
			t.Error(err)
			return
		}
		runtime.UnlockOSThread()
	}()
	<-done
}

// charon is one charon process and its configuration directory.
type charon struct {
	t    *testing.T
	ns   string
	dir  string
	cmd  *exec.Cmd
	log  string
	conf string
	exit chan struct{}
}

func (c *charon) env() []string { return append(os.Environ(), "STRONGSWAN_CONF="+c.conf) }

// startCharon writes strongswan.conf and swanctl.conf under a temporary
// directory, starts charon in ns, and loads the configuration with swanctl.
func startCharon(t *testing.T, ns, swanctlConf string) *charon {
	t.Helper()
	dir := t.TempDir()
	c := &charon{t: t, ns: ns, dir: dir, log: filepath.Join(dir, "charon.log"), conf: filepath.Join(dir, "strongswan.conf"), exit: make(chan struct{})}
	for _, d := range []string{"swanctl", "swanctl/conf.d", "swanctl/x509", "swanctl/x509ca", "swanctl/private", "run"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	strongswan := fmt.Sprintf(`charon {
	load_modular = no
	load = random nonce aes sha1 sha2 hmac gcm chapoly curve25519 gmp openssl pem pkcs1 x509 pubkey kdf kernel-libipsec kernel-netlink socket-default vici updown
	port = 500
	port_nat_t = 4500
	retransmit_timeout = 1
	retransmit_tries = 3
	filelog {
		log {
			path = %s
			default = 1
			ike = 2
			cfg = 2
			enc = 1
			time_format = %%T
		}
	}
	plugins {
		vici {
			socket = unix://%s/charon.vici
		}
	}
}
swanctl {
	socket = unix://%s/charon.vici
}
`, c.log, dir, dir)
	if err := os.WriteFile(c.conf, []byte(strongswan), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "swanctl/swanctl.conf"), []byte(swanctlConf), 0o600); err != nil {
		t.Fatal(err)
	}
	// ip netns exec enters ns; unshare gives a private mount namespace in
	// which /run is a fresh tmpfs and /etc/swanctl is this test's.
	script := fmt.Sprintf("mount --make-rprivate / && mount -t tmpfs tmpfs /run && mount --bind %s/swanctl /etc/swanctl && exec %s", dir, charonBin)
	c.cmd = exec.Command("ip", "netns", "exec", ns, "unshare", "-m", "sh", "-c", script)
	c.cmd.Env = c.env()
	var out bytes.Buffer
	c.cmd.Stdout, c.cmd.Stderr = &out, &out
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.cmd.Wait(); close(c.exit) }()
	t.Cleanup(func() {
		c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.exit:
		case <-time.After(5 * time.Second):
			c.cmd.Process.Kill()
			<-c.exit
		}
		if t.Failed() {
			b, _ := os.ReadFile(c.log)
			t.Logf("charon output:\n%s\ncharon log:\n%s", out.String(), b)
		}
	})
	// charon is ready once swanctl can load the configuration over vici.
	// The file is named explicitly: swanctl may enter charon's mount
	// namespace before charon's /etc/swanctl bind mount exists.
	deadline := time.Now().Add(15 * time.Second)
	for {
		o, err := c.swanctl("--load-all", "--file", filepath.Join(dir, "swanctl/swanctl.conf"))
		if err == nil {
			break
		}
		select {
		case <-c.exit:
			t.Fatalf("charon exited: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("swanctl --load-all did not succeed within 15s: %v\n%s", err, o)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return c
}

// swanctl runs swanctl in charon's network and mount namespaces.
func (c *charon) swanctl(args ...string) (string, error) {
	a := append([]string{"-t", fmt.Sprint(c.cmd.Process.Pid), "-m", "-n", "swanctl"}, args...)
	cmd := exec.Command("nsenter", a...)
	cmd.Env = c.env()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// waitSAs polls swanctl --list-sas until every string of want appears, or
// fails at the deadline.
func (c *charon) waitSAs(want ...string) string {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := c.swanctl("--list-sas")
		ok := err == nil
		for _, w := range want {
			ok = ok && strings.Contains(out, w)
		}
		if ok {
			return out
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("swanctl --list-sas lacks %q after 10s:\n%s", want, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// capture records the IKE messages of an exchange, for the seed corpus.
type capture struct {
	mu   sync.Mutex
	msgs []capturedMsg
}

type capturedMsg struct {
	out bool
	b   []byte
}

func (c *capture) observe(out bool, b []byte) {
	c.mu.Lock()
	c.msgs = append(c.msgs, capturedMsg{out, append([]byte(nil), b...)})
	c.mu.Unlock()
}

func listenPair(t *testing.T, ns string, addr netip.Addr) (c500, c4500 *net.UDPConn) {
	t.Helper()
	inNetns(t, ns, func() {
		var err error
		if c500, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 500))); err != nil {
			t.Error(err)
			return
		}
		if c4500, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, NATTPort))); err != nil {
			t.Error(err)
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	t.Cleanup(func() { c500.Close(); c4500.Close() })
	return c500, c4500
}
