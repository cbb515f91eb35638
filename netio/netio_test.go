package netio

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/keelinit/keel/internal/testenv"
	"github.com/keelinit/keel/internal/testwait"
)

func batchBufs() ([][]byte, []int, []netip.AddrPort) {
	bufs := make([][]byte, BatchSize)
	for i := range bufs {
		bufs[i] = make([]byte, MaxSegment)
	}
	return bufs, make([]int, BatchSize), make([]netip.AddrPort, BatchSize)
}

// receiveN collects n datagrams from r, failing after 5 s.
func receiveN(t *testing.T, r Receiver, n int) [][]byte {
	t.Helper()
	bufs, sizes, srcs := batchBufs()
	var got [][]byte
	done := make(chan error, 1)
	go func() {
		for len(got) < n {
			k, err := r.Receive(bufs, sizes, srcs)
			if err != nil {
				done <- err
				return
			}
			for i := 0; i < k; i++ {
				if sizes[i] > 0 {
					got = append(got, append([]byte(nil), bufs[i][:sizes[i]]...))
				}
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("received %d of %d datagrams", len(got), n)
	}
	return got
}

func TestUDPSendReceive(t *testing.T) {
	u, err := ListenUDP(0)
	if err != nil {
		t.Skipf("no UDP sockets: %v", err)
	}
	defer u.Close()
	var r4 *Receiver
	for i := range u.Receivers() {
		if u.Receivers()[i].Kind != KindUDP {
			t.Fatalf("kind %v", u.Receivers()[i].Kind)
		}
	}
	if len(u.Receivers()) == 0 {
		t.Fatal("no receivers")
	}
	r4 = &u.Receivers()[0] // StdNetBind lists IPv4 first
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), u.Port())
	cases := []struct {
		name  string
		sizes []int
	}{
		{"one", []int{100}},
		{"gso run", []int{1400, 1400, 1400, 1400, 1400, 700}},
		{"mixed", []int{1400, 60, 1400, 1400, 9000, 1}},
	}
	for _, gso := range []bool{true, false} {
		u.SetGSO(gso)
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s gso=%v", c.name, gso), func(t *testing.T) {
				var bufs, want [][]byte
				for i, n := range c.sizes {
					// Big capacity, as the dataplane's pool packets have.
					b := make([]byte, n, MaxSegment)
					for j := range b {
						b[j] = byte(i + j)
					}
					bufs = append(bufs, b)
					want = append(want, bytes.Clone(b))
				}
				if err := u.Send(bufs, dst); err != nil {
					t.Fatal(err)
				}
				got := receiveN(t, *r4, len(want))
				for i := range want {
					if !bytes.Equal(got[i], want[i]) {
						t.Fatalf("datagram %d: got %d bytes, want %d", i, len(got[i]), len(want[i]))
					}
				}
			})
		}
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{KindUDP: "udp", KindIP: "ip", KindESP: "esp", 9: "unknown"} {
		if k.String() != want {
			t.Errorf("%d: %q", k, k.String())
		}
	}
}

// inNetns runs f on a goroutine locked to a thread in a fresh network
// namespace (the thread is discarded afterwards). Root only.
func inNetns(t *testing.T, f func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespace)")
	}
	done := make(chan any, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		defer func() { done <- recover() }()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			done <- "unshare: " + err.Error()
			runtime.Goexit()
		}
		f()
	}()
	if r, _ := testwait.Recv(t, testwait.Long, "function in a new network namespace returned", done); r != nil {
		t.Fatal(r)
	}
}

func ip4udp(src, dst netip.Addr, dport uint16, payload []byte) []byte {
	p := make([]byte, 28+len(payload))
	p[0], p[8], p[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	s, d := src.As4(), dst.As4()
	copy(p[12:], s[:])
	copy(p[16:], d[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(p[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(p[10:], ^uint16(sum))
	binary.BigEndian.PutUint16(p[20:], 40000)
	binary.BigEndian.PutUint16(p[22:], dport)
	binary.BigEndian.PutUint16(p[24:], uint16(8+len(payload))) // checksum 0: none (IPv4)
	copy(p[28:], payload)
	return p
}

func TestTUNAndConfigureInterface(t *testing.T) {
	inTUNNetns(t, "ktest0", func(tun TUN, fail func(string, error)) string {
		local := netip.MustParseAddr("10.77.0.1")
		if err := ConfigureInterface("ktest0", []netip.Prefix{netip.PrefixFrom(local, 24)},
			[]netip.Prefix{netip.MustParsePrefix("10.78.0.0/16")}); err != nil {
			fail("ConfigureInterface", err)
		}
		if mtu, err := tun.MTU(); err != nil || mtu != 1400 {
			return "MTU not 1400"
		}
		// Kernel -> TUN: a datagram routed into 10.78/16 is read from the TUN.
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(10, 77, 0, 1)})
		if err != nil {
			fail("listen", err)
		}
		defer c.Close()
		if _, err := c.WriteToUDP([]byte("to the tunnel"), &net.UDPAddr{IP: net.IPv4(10, 78, 0, 5), Port: 9}); err != nil {
			fail("write", err)
		}
		bufs, sizes, _ := batchBufs()
		for {
			n, err := tun.Read(bufs, sizes, 0)
			if err != nil {
				fail("tun read", err)
			}
			p := bufs[0][:sizes[0]]
			if n >= 1 && len(p) >= 28 && p[0]>>4 == 4 && p[9] == 17 && netip.AddrFrom4([4]byte(p[16:20])) == netip.MustParseAddr("10.78.0.5") {
				if string(p[28:]) != "to the tunnel" {
					return "payload mismatch"
				}
				break
			}
			// IPv6 router solicitations and the like: skip.
		}
		// TUN -> kernel: a packet written to the TUN is delivered locally.
		port := uint16(c.LocalAddr().(*net.UDPAddr).Port)
		pkt := ip4udp(netip.MustParseAddr("10.78.0.5"), local, port, []byte("from the tunnel"))
		w := make([]byte, TUNOffset+len(pkt), TUNOffset+MaxSegment)
		copy(w[TUNOffset:], pkt)
		if _, err := tun.Write([][]byte{w}, TUNOffset); err != nil {
			fail("tun write", err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 100)
		n, from, err := c.ReadFromUDP(b)
		if err != nil {
			fail("read from tun", err)
		}
		if string(b[:n]) != "from the tunnel" || !from.IP.Equal(net.IPv4(10, 78, 0, 5)) {
			return "delivered packet mismatch"
		}
		return ""
	})
}

func TestRawESP(t *testing.T) {
	var failure string
	inNetns(t, func() {
		fail := func(s string, err error) { failure = s + ": " + err.Error(); runtime.Goexit() }
		if err := ConfigureInterface("lo", nil, nil); err != nil {
			fail("lo up", err)
		}
		lo := netip.MustParseAddr("127.0.0.1")
		r, err := ListenRawESP(lo)
		if err != nil {
			fail("ListenRawESP", err)
		}
		defer r.Close()
		rs := r.Receivers()
		if len(rs) != 1 || rs[0].Kind != KindIP {
			failure = "want one IPv4 receiver of kind ip"
			return
		}
		esp := []byte{0, 0, 0x10, 0x01, 0, 0, 0, 1, 0xde, 0xad, 0xbe, 0xef}
		if err := r.Send([][]byte{esp, esp}, netip.AddrPortFrom(lo, 0)); err != nil {
			fail("send", err)
		}
		bufs, sizes, srcs := batchBufs()
		got := 0
		deadline := time.Now().Add(5 * time.Second)
		for got < 2 && time.Now().Before(deadline) {
			n, err := rs[0].Receive(bufs, sizes, srcs)
			if err != nil {
				fail("receive", err)
			}
			for i := 0; i < n; i++ {
				p := bufs[i][:sizes[i]]
				if len(p) != 20+len(esp) || p[9] != 50 || !bytes.Equal(p[20:], esp) || srcs[i].Addr() != lo {
					failure = "unexpected raw packet"
					return
				}
				got++
			}
		}
	})
	if failure != "" {
		t.Fatal(failure)
	}
}

// TestRemoveRoutes: routes ConfigureInterface added into a TUN are gone
// after RemoveRoutes (the kernel has no route to them: connect fails),
// others stay, and removing a route that is not there is no error.
func TestRemoveRoutes(t *testing.T) {
	inTUNNetns(t, "ktest1", func(_ TUN, fail func(string, error)) string {
		keep, drop := netip.MustParsePrefix("10.79.1.0/24"), netip.MustParsePrefix("10.78.0.0/16")
		if err := ConfigureInterface("ktest1", []netip.Prefix{netip.MustParsePrefix("10.77.0.1/24")}, []netip.Prefix{keep, drop}); err != nil {
			fail("ConfigureInterface", err)
		}
		routed := func(dst string) bool {
			c, err := net.Dial("udp4", dst+":9")
			if err == nil {
				c.Close()
			}
			return err == nil
		}
		if !routed("10.78.0.5") || !routed("10.79.1.5") {
			return "routes not installed"
		}
		if err := RemoveRoutes("ktest1", []netip.Prefix{drop, netip.MustParsePrefix("10.80.0.0/16")}); err != nil {
			fail("RemoveRoutes", err)
		}
		if routed("10.78.0.5") {
			return "10.78.0.0/16 still routed after RemoveRoutes"
		}
		if !routed("10.79.1.5") {
			return "10.79.1.0/24 removed too"
		}
		if err := RemoveRoutes("nosuchif0", []netip.Prefix{drop}); err == nil || !strings.Contains(err.Error(), "nosuchif0") {
			return fmt.Sprintf("RemoveRoutes on a missing interface: %v", err)
		}
		return ""
	})
}

// inTUNNetns runs f in a fresh network namespace (inNetns) with the TUN
// name open (MTU 1400). f fails the test by returning a failure's text or
// by calling fail, which ends f.
func inTUNNetns(t *testing.T, name string, f func(tun TUN, fail func(string, error)) string) {
	t.Helper()
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		testenv.Missing(t, "no /dev/net/tun")
	}
	var failure string
	inNetns(t, func() {
		fail := func(s string, err error) { failure = s + ": " + err.Error(); runtime.Goexit() }
		tun, err := OpenTUN(name, 1400)
		if err != nil {
			fail("OpenTUN", err)
		}
		defer tun.Close()
		failure = f(tun, fail)
	})
	if failure != "" {
		t.Fatal(failure)
	}
}
