package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/keelinit/keel/etc"
	"github.com/keelinit/keel/internal/testenv"
	"github.com/keelinit/keel/services"
	"github.com/keelinit/keel/services/api"
	"github.com/keelinit/keel/services/builtin"
)

// The topology of bench/tunnel.sh: A 10.99.0.1 on vA <-> B 10.99.0.2 on vB,
// tunnel addresses 10.98.0.1 and 10.98.0.2 on keel0.
const (
	outerA, outerB = "10.99.0.1", "10.99.0.2"
	innerA, innerB = "10.98.0.1", "10.98.0.2"
	spiAB, spiBA   = 0x1001, 0x2001
)

type side struct {
	name, ns      string
	outer, inner  string
	peer, peerIn  string
	socket        string      // keeld's control socket
	log           *syncBuffer // keeld's log
	outKey, inKey string
	outSPI, inSPI int
}

type topo struct {
	// udpGSO is the gateways' ipsec_udp_gso: a UDP GSO batch crosses a
	// veth unsegmented, so a capture would show one datagram per batch.
	// With ethtool the veths segment in software instead (the production
	// send path stays); without it the gateways send without GSO.
	udpGSO string
	// encap is the gateways' ipsec_encap: "udp" (default) or "esp".
	encap string
	t     *testing.T
	dir   string
	a, b  *side   // the two sides of newTopo
	more  []*side // the sides of other topologies (newHubTopo)
	mu    sync.Mutex
	cmds  []*exec.Cmd
	// exited holds, for the processes of start, a channel closed once
	// the process was waited for (start's goroutine is their only Wait).
	exited map[*exec.Cmd]chan struct{}
}

// nsPrefix starts the name of every namespace the tests create:
// nsPrefix + PID + "-" + N + "-" + side.
const nsPrefix = "keele2e-"

var nsCounter atomic.Int64

// sweepStale deletes namespaces left by test processes that died without
// cleaning up (killed by a timeout, say).
func sweepStale() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || !strings.HasPrefix(f[0], nsPrefix) {
			continue
		}
		pid, _, _ := strings.Cut(strings.TrimPrefix(f[0], nsPrefix), "-")
		if _, err := os.Stat("/proc/" + pid); err == nil {
			continue // its test is still running
		}
		exec.Command("ip", "netns", "del", f[0]).Run()
	}
}

// dieWithParent makes a child get SIGKILL when the test process dies, so a
// killed test leaves no gateways running.
func dieWithParent(c *exec.Cmd) {
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// requireTools skips unless root; without /dev/net/tun or one of the
// tools (ip always) it skips, or fails under CI=true (testenv.Missing).
func requireTools(t *testing.T, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		testenv.Missing(t, "no /dev/net/tun")
	}
	testenv.Tools(t, append([]string{"ip"}, tools...)...)
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	if binDir == "" {
		t.Skip("keeld and keelctl not built")
	}
}

func randHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := cryptoRead(b); err != nil {
		t.Fatal(err)
	}
	return "0x" + hex.EncodeToString(b)
}

// newTopo creates the namespaces and the veth pair; t.Cleanup removes them
// and every process started through the topology, whatever happens.
func newTopo(t *testing.T) *topo {
	t.Helper()
	tp, id := newTopoBase(t)
	kab, kba := randHex(t, 20), randHex(t, 20)
	tp.a = &side{name: "A", ns: id + "A", outer: outerA, inner: innerA, peer: outerB, peerIn: innerB,
		outKey: kab, inKey: kba, outSPI: spiAB, inSPI: spiBA}
	tp.b = &side{name: "B", ns: id + "B", outer: outerB, inner: innerB, peer: outerA, peerIn: innerA,
		outKey: kba, inKey: kab, outSPI: spiBA, inSPI: spiAB}
	tp.run("ip", "netns", "add", tp.a.ns)
	tp.run("ip", "netns", "add", tp.b.ns)
	tp.run("ip", "link", "add", "vA", "netns", tp.a.ns, "type", "veth", "peer", "name", "vB", "netns", tp.b.ns)
	for _, s := range []*side{tp.a, tp.b} {
		dev := "v" + s.name
		tp.run("ip", "-n", s.ns, "addr", "add", s.outer+"/24", "dev", dev)
		tp.run("ip", "-n", s.ns, "link", "set", "lo", "up")
		tp.run("ip", "-n", s.ns, "link", "set", dev, "up")
		tp.noUDPGSO(s, dev)
	}
	return tp
}

// newTopoBase returns a topology without namespaces yet, and the prefix of
// its namespace names; t.Cleanup stops its processes, removes the
// namespaces of its sides and, when the test failed, logs their keelds'
// logs.
func newTopoBase(t *testing.T) (*topo, string) {
	t.Helper()
	id := fmt.Sprintf("%s%d-%d-", nsPrefix, os.Getpid(), nsCounter.Add(1))
	tp := &topo{t: t, dir: t.TempDir(), udpGSO: "YES", encap: "udp"}
	t.Cleanup(tp.cleanup)
	t.Cleanup(func() {
		// After cleanup stopped keeld: its log tells why a test failed.
		if t.Failed() {
			for _, s := range tp.sides() {
				if s.log != nil {
					t.Logf("keeld %s log:\n%s", s.name, s.log.String())
				}
			}
		}
	})
	return tp, id
}

// sides returns every side of the topology.
func (tp *topo) sides() []*side {
	var out []*side
	for _, s := range append([]*side{tp.a, tp.b}, tp.more...) {
		if s != nil {
			out = append(out, s)
		}
	}
	return out
}

// noUDPGSO turns UDP segmentation offload off on dev in s's namespace (so
// that a capture shows every ESP-in-UDP datagram, segmented in software),
// or, without ethtool or with KEEL_E2E_UDP_GSO=NO, makes the gateways send
// without GSO.
func (tp *topo) noUDPGSO(s *side, dev string) {
	tp.t.Helper()
	if _, err := exec.LookPath("ethtool"); err == nil && os.Getenv("KEEL_E2E_UDP_GSO") != "NO" {
		tp.in(s, "ethtool", "-K", dev, "tx-udp-segmentation", "off")
	} else {
		tp.udpGSO = "NO"
	}
}

func (tp *topo) cleanup() {
	tp.mu.Lock()
	cmds := tp.cmds
	tp.cmds = nil
	tp.mu.Unlock()
	for _, c := range cmds {
		if c.Process != nil {
			c.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.Now().Add(3 * time.Second)
	for _, c := range cmds {
		if c.Process == nil {
			continue
		}
		tp.mu.Lock()
		done := tp.exited[c]
		tp.mu.Unlock()
		if done == nil {
			done = make(chan struct{})
			go func() { c.Wait(); close(done) }()
		}
		select {
		case <-done:
		case <-time.After(time.Until(deadline)):
			c.Process.Kill()
			<-done
		}
	}
	for _, s := range tp.sides() {
		exec.Command("ip", "netns", "del", s.ns).Run()
	}
}

// run runs a short command (bounded to 20 s) and fails the test on error.
func (tp *topo) run(name string, args ...string) string {
	tp.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		tp.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// in runs a command in s's namespace.
func (tp *topo) in(s *side, name string, args ...string) string {
	tp.t.Helper()
	return tp.run("ip", append([]string{"netns", "exec", s.ns, name}, args...)...)
}

// command returns the command line name args to run in s's namespace.
func (s *side) command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", s.ns, name}, args...)...)
}

// spawn starts c, which gets SIGKILL if the test process dies and which
// cleanup stops; the test fails if c cannot start. Whoever spawns c waits
// for it.
func (tp *topo) spawn(c *exec.Cmd) {
	tp.t.Helper()
	dieWithParent(c)
	if err := c.Start(); err != nil {
		tp.t.Fatalf("start %s: %v", strings.Join(c.Args, " "), err)
	}
	tp.mu.Lock()
	tp.cmds = append(tp.cmds, c)
	tp.mu.Unlock()
}

// start starts a long-running command in s's namespace, stopped by cleanup;
// the channel is closed when it exits.
func (tp *topo) start(s *side, stdout, stderr io.Writer, env []string, name string, args ...string) (*exec.Cmd, <-chan struct{}) {
	tp.t.Helper()
	c := s.command(name, args...)
	c.Stdout, c.Stderr = stdout, stderr
	c.Env = append(os.Environ(), env...)
	tp.spawn(c)
	done := make(chan struct{})
	go func() { c.Wait(); close(done) }()
	tp.mu.Lock()
	if tp.exited == nil {
		tp.exited = map[*exec.Cmd]chan struct{}{}
	}
	tp.exited[c] = done
	tp.mu.Unlock()
	return c, done
}

// syncBuffer is a bytes.Buffer safe for a writer process and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// startKeeld boots a keeld in s's namespace on a temporary root: the
// embedded appliance's rc.d and defaults, an rc.conf with the gateway
// settings (ipsec_tun keel0 and the topology's addresses), cryptodev_modules
// baseline and kld_list kld, and an ipsec.conf with the SAs mirrored across
// the two sides. It returns once the boot is over, with ipsec running.
func (tp *topo) startKeeld(s *side, baseline, kld string) {
	tp.t.Helper()
	proto := "esp-udp"
	if tp.encap == "esp" {
		proto = "esp"
	}
	conf := fmt.Sprintf(`flush;
spdflush;
add %[1]s %[2]s %[9]s %[5]d -m tunnel -r 512 -E aes-gcm-16 %[7]s;
add %[2]s %[1]s %[9]s %[6]d -m tunnel -r 512 -E aes-gcm-16 %[8]s;
spdadd %[3]s %[4]s any -P out ipsec esp/tunnel/%[1]s-%[2]s/require;
spdadd %[4]s %[3]s any -P in ipsec esp/tunnel/%[2]s-%[1]s/require;
`, s.outer, s.peer, s.inner, s.peerIn, s.outSPI, s.inSPI, s.outKey, s.inKey, proto)
	rc := fmt.Sprintf(`hostname="keel%s"
cryptodev_modules="%s"
kld_list="%s"
ipsec_enable="YES"
ipsec_tun="keel0"
ipsec_local="%s"
ipsec_peer="%s"
ipsec_encap="%s"
ipsec_tun_addr="%s/24"
ipsec_tun_mtu="1420"
ipsec_udp_gso="%s"
`, s.name, baseline, kld, s.outer, s.peer, tp.encap, s.inner, tp.udpGSO)
	tp.boot(s, rc, conf)
}

// boot starts a keeld in s's namespace on a temporary root with the rc.conf
// rc and the ipsec.conf conf (see writeRoot) and returns once the boot is
// over, with ipsec running.
func (tp *topo) boot(s *side, rc, conf string) {
	tp.t.Helper()
	root := filepath.Join(tp.dir, "root"+s.name)
	if err := writeRoot(root, rc, conf); err != nil {
		tp.t.Fatal(err)
	}
	run := filepath.Join(tp.dir, "run"+s.name)
	s.socket = filepath.Join(run, "keeld.sock")
	s.log = &syncBuffer{}
	_, exited := tp.start(s, s.log, s.log, nil, filepath.Join(binDir, "keeld"), "--root", root, "--runtime-dir", run,
		"--socket", s.socket, "--log-format", "text")
	cl := api.NewClient(s.socket)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var info api.BootInfo
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := cl.Get(ctx, "/v1/boot/status", nil, &info)
		cancel()
		if err == nil && info.Booted {
			break
		}
		select {
		case <-exited:
			tp.t.Fatalf("keeld %s exited during boot:\n%s", s.name, s.log.String())
		default:
		}
		if time.Now().After(deadline) {
			tp.t.Fatalf("keeld %s did not boot in 20 s:\n%s", s.name, s.log.String())
		}
	}
	var d services.Detail
	tp.keelctlJSON(s, &d, "status", "ipsec")
	if d.State != services.StateRunning {
		tp.t.Fatalf("keeld %s: ipsec %s: %s\n%s", s.name, d.State, d.Reason, s.log.String())
	}
}

// writeRoot writes a keeld root at dir: etc/defaults/rc.conf and etc/rc.d
// from the embedded default appliance, with rc.conf and ipsec.conf (0600:
// it holds the keys) replaced.
func writeRoot(dir, rc, ipsecConf string) error {
	if err := os.CopyFS(dir, etc.Root()); err != nil {
		return err
	}
	for name, data := range map[string]string{"etc/rc.conf": rc, "etc/ipsec.conf": ipsecConf} {
		p := filepath.Join(dir, name)
		os.Remove(p)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// keelctl runs keelctl against s's keeld (bounded to 30 s) and returns its
// output; it fails the test when keelctl fails.
func (tp *topo) keelctl(s *side, args ...string) string {
	tp.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "keelctl"), append([]string{"--socket", s.socket}, args...)...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		tp.t.Fatalf("keelctl %s on %s: %v: %s%s", strings.Join(args, " "), s.name, err, out, stderr)
	}
	return string(out)
}

// keelctlJSON runs keelctl --json args and decodes its output into v.
func (tp *topo) keelctlJSON(s *side, v any, args ...string) {
	tp.t.Helper()
	out := tp.keelctl(s, append([]string{"--json"}, args...)...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		tp.t.Fatalf("keelctl --json %s on %s: %v: %q", strings.Join(args, " "), s.name, err, out)
	}
}

// status is keelctl --json ipsec: the gateway interface's counters and the
// SAs.
func (tp *topo) status(s *side) builtin.IPsec {
	tp.t.Helper()
	var v builtin.IPsec
	tp.keelctlJSON(s, &v, "ipsec")
	if !v.Running || len(v.Interfaces) != 1 || v.Interfaces[0].Name != "keel0" {
		tp.t.Fatalf("keelctl ipsec on %s: %+v", s.name, v)
	}
	return v
}

// waitSAs waits (10 s at most) until every SA of s is bound to provider.
func (tp *topo) waitSAs(s *side, provider string) builtin.IPsec {
	tp.t.Helper()
	var v builtin.IPsec
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		v = tp.status(s)
		ok := len(v.SAs) == 2
		for _, sa := range v.SAs {
			ok = ok && sa.Provider == provider
		}
		if ok {
			return v
		}
	}
	tp.t.Fatalf("keeld %s: SAs not all on %s: %+v", s.name, provider, v.SAs)
	return v
}

// capture runs tcpdump on s's veth; stop it to get the pcap path.
type capture struct {
	cmd    *exec.Cmd
	file   string
	stderr *syncBuffer
}

func (tp *topo) capture(s *side, snaplen int) *capture {
	tp.t.Helper()
	return tp.captureDev(s, "v"+s.name, snaplen)
}

// captureDev runs tcpdump on the device dev of s's namespace.
func (tp *topo) captureDev(s *side, dev string, snaplen int) *capture {
	tp.t.Helper()
	cp := &capture{file: filepath.Join(tp.dir, "cap"+s.name+"-"+dev+".pcap"), stderr: &syncBuffer{}}
	cp.cmd = s.command("tcpdump", "-i", dev, "-n", "-U", "-B", "16384", "-s", strconv.Itoa(snaplen), "-w", cp.file, "ip")
	cp.cmd.Stderr = cp.stderr
	if keep := os.Getenv("KEEL_E2E_KEEP"); keep != "" {
		// Keep the capture of a failed test for inspection.
		tp.t.Cleanup(func() {
			if tp.t.Failed() {
				if b, err := os.ReadFile(cp.file); err == nil {
					name := strings.NewReplacer("/", "_", " ", "_").Replace(tp.t.Name())
					os.WriteFile(filepath.Join(keep, name+"-"+s.name+"-"+dev+".pcap"), b, 0o600)
				}
			}
		})
	}
	tp.spawn(cp.cmd)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if strings.Contains(cp.stderr.String(), "listening on") {
			return cp
		}
	}
	tp.t.Fatalf("tcpdump did not start: %s", cp.stderr.String())
	return nil
}

// stop ends the capture and reports the packets the kernel dropped.
func (cp *capture) stop(t *testing.T) (dropped int) {
	t.Helper()
	time.Sleep(200 * time.Millisecond)
	cp.cmd.Process.Signal(syscall.SIGINT)
	done := make(chan struct{})
	go func() { cp.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cp.cmd.Process.Kill()
		<-done
	}
	sc := bufio.NewScanner(strings.NewReader(cp.stderr.String()))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 3 && strings.HasSuffix(sc.Text(), "dropped by kernel") {
			dropped, _ = strconv.Atoi(f[0])
		}
	}
	return dropped
}

// tshark runs tshark on a capture with the given extra arguments and returns
// the output lines.
func (tp *topo) tshark(file string, args ...string) []string {
	tp.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "tshark", append([]string{"-n", "-r", file}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+tp.dir) // no user preferences
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		tp.t.Fatalf("tshark %v: %v\n%s", args, err, errb.String())
	}
	var lines []string
	for _, l := range strings.Split(out.String(), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// tcpTransfer sends n bytes from one side's inner address to the other's
// (port 5001) at rate bytes/s (0: unpaced) and checks the payload hash. If
// during is set, it runs once the transfer is under way.
func (tp *topo) tcpTransfer(from, to *side, n, rate int64, during func()) {
	tp.t.Helper()
	f := tp.startTCP(from, to, to.inner, n, rate)
	if during != nil {
		during()
	}
	tp.waitTCP(f)
}

// tcpFlow is a TCP transfer under way (startTCP).
type tcpFlow struct {
	from, to          *side
	addr              string
	n                 int64
	sink, src         *exec.Cmd
	sinkOut, srcOut   *syncBuffer
	sinkErr, srcErr   *syncBuffer
	sinkDone, srcDone chan error
}

// startTCP starts a sink listening on addr:5001 in to's namespace and, once
// it listens, a source in from's namespace that sends it n pseudo-random
// bytes at rate bytes/s (0: unpaced). Several may run at once (on distinct
// addresses); waitTCP checks each.
func (tp *topo) startTCP(from, to *side, addr string, n, rate int64) *tcpFlow {
	tp.t.Helper()
	exe, err := os.Executable()
	if err != nil {
		tp.t.Fatal(err)
	}
	f := &tcpFlow{from: from, to: to, addr: addr, n: n, sinkOut: &syncBuffer{}, srcOut: &syncBuffer{}, sinkErr: &syncBuffer{}, srcErr: &syncBuffer{}}
	f.sink = to.command(exe, "-test.run=^$", "sink", addr+":5001")
	f.sink.Env = append(os.Environ(), helperEnv+"=sink")
	f.sink.Stdout, f.sink.Stderr = f.sinkOut, f.sinkErr
	tp.spawn(f.sink)
	f.sinkDone = waitChan(f.sink)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(f.sinkOut.String(), "listening"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			tp.t.Fatalf("sink on %s did not listen: %s", addr, f.sinkErr.String())
		}
	}
	f.src = from.command(exe, "-test.run=^$", "source", addr+":5001")
	f.src.Env = append(os.Environ(), helperEnv+"=source", fmt.Sprintf("KEEL_E2E_BYTES=%d", n), fmt.Sprintf("KEEL_E2E_RATE=%d", rate))
	f.src.Stdout, f.src.Stderr = f.srcOut, f.srcErr
	tp.spawn(f.src)
	f.srcDone = waitChan(f.src)
	return f
}

// waitChan waits for c on a goroutine; the channel gets its result.
func waitChan(c *exec.Cmd) chan error {
	ch := make(chan error, 1)
	go func() { ch <- c.Wait() }()
	return ch
}

// waitTCP waits (60 s at most) for the transfer to end and checks that the
// sink got all the bytes the source sent, with the same hash.
func (tp *topo) waitTCP(f *tcpFlow) {
	tp.t.Helper()
	wait := func(c *exec.Cmd, done chan error, what string, stderr *syncBuffer) {
		select {
		case err := <-done:
			if err != nil {
				tp.t.Fatalf("%s %s->%s: %v: %s", what, f.from.name, f.addr, err, stderr.String())
			}
		case <-time.After(60 * time.Second):
			c.Process.Kill()
			tp.t.Fatalf("%s %s->%s: timeout", what, f.from.name, f.addr)
		}
	}
	wait(f.src, f.srcDone, "source", f.srcErr)
	wait(f.sink, f.sinkDone, "sink", f.sinkErr)
	want := strings.TrimSpace(lastLine(f.srcOut.String()))
	got := strings.TrimSpace(lastLine(f.sinkOut.String()))
	if want == "" || got != want {
		tp.t.Fatalf("TCP %s->%s: sink got %q, source sent %q", f.from.name, f.addr, got, want)
	}
	if !strings.HasPrefix(got, strconv.FormatInt(f.n, 10)+" ") {
		tp.t.Fatalf("TCP %s->%s: transferred %q, want %d bytes", f.from.name, f.addr, got, f.n)
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
