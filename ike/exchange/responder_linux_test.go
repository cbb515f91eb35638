package exchange

import (
	"context"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelinit/keel/ike/wire"
)

// TestCharonInitiatesToKeel: charon initiates (swanctl --initiate) to a
// Keel Server; charon shows the IKE SA ESTABLISHED and the CHILD_SA
// INSTALLED in UDP, the CHILD_SA goes into a Keel engine, and a ping from
// charon's side passes through it.
func TestCharonInitiatesToKeel(t *testing.T) {
	requireTool(t, charonBin, "swanctl", "nsenter", "unshare", "ip", "ping")
	ns := newNetnsPair(t)
	ch := startCharon(t, ns.c, charonConf("aes256gcm16-prfsha256-x25519,aes128-sha256-modp2048", "aes256gcm16", testPSK, "yes"))
	c500, c4500 := listenPair(t, ns.k, netip.MustParseAddr("10.97.0.1"))

	type est struct {
		ike   *IKESA
		child *ChildSA
	}
	got := make(chan est, 1)
	srv := &Server{
		Config: &ResponderConfig{
			LocalID: Identity{wire.ID_FQDN, []byte("keel.example")},
			PSK: func(id Identity) ([]byte, bool) {
				return []byte(testPSK), id.String() == "charon.example"
			},
			LocalTS:  []wire.Selector{prefixSelector("10.96.1.0/24")},
			RemoteTS: []wire.Selector{prefixSelector("10.96.0.0/16")},
		},
		OnEstablished: func(ike *IKESA, child *ChildSA) { got <- est{ike, child} },
	}
	var cap capture
	srv.Observe = cap.observe
	var echo atomic.Pointer[espEcho]
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- srv.Serve(ctx, c500, c4500, func(b []byte, from netip.AddrPort) {
			if e := echo.Load(); e != nil {
				e.handle(b, from)
			}
		})
	}()
	t.Cleanup(func() { cancel(); <-served })

	if out, err := ch.swanctl("--initiate", "--child", "net", "--timeout", "15"); err != nil {
		t.Fatalf("swanctl --initiate: %v\n%s", err, out)
	}
	var e est
	select {
	case e = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("Keel's responder did not establish within 10s")
	}
	defer e.ike.Zero()
	defer e.child.Zero()
	if e.child == nil {
		t.Fatal("IKE SA up but no CHILD_SA")
	}
	t.Logf("%v\n%v", e.ike, e.child)
	if e.ike.RemoteID.String() != "charon.example" || !e.child.Encap || e.child.Remote.Port() != NATTPort {
		t.Fatalf("peer %s, encap %v, remote %v", e.ike.RemoteID, e.child.Encap, e.child.Remote)
	}
	if len(e.child.RemoteTS) != 1 || e.child.RemoteTS[0] != prefixSelector("10.96.2.0/24") {
		t.Fatalf("TSi %v, want charon's 10.96.2.0/24", e.child.RemoteTS)
	}
	ch.waitSAs("ESTABLISHED", "INSTALLED", "TUNNEL-in-UDP", e.ike.SPIi.String()+"_i", e.ike.SPIr.String()+"_r")
	writeSeeds(t, "charon-5.9.8-initiator-x25519-aesgcm256", "request", &cap, e.ike)
	eng := installChild(t, e.child)
	ec := newESPEcho(c4500, eng, e.child.Local)
	echo.Store(ec)
	pingFromCharon(t, ns, ch, ec)
}
