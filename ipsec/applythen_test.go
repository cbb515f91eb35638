package ipsec

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/keelinit/keel/ipsec/spd"
)

// TestApplyThen: prepare sees the new policies while the engine still
// runs the old configuration; a prepare error changes nothing (the SAD,
// the SPD, the kept SA's sequence numbers) and closes the SAs the
// configuration would have added; a nil error installs everything.
func TestApplyThen(t *testing.T) {
	e := newTestEngine(t, Options{})
	pool := NewPool(0)
	applyText(t, e, baseConf)
	if p := sendOne(t, e, pool); p.Seq != 1 {
		t.Fatalf("seq %d", p.Seq)
	}
	kept := e.sad.Load().bySPI[0x1001][0]
	next := baseConf + "add 192.0.2.1 192.0.2.3 esp 0x3001 -m tunnel -E aes-gcm-16 0x0a0102030405060708090a0b0c0d0e0f10111213;\n" +
		"spdadd 192.168.1.0/24 192.168.3.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.3/require;\n"
	newDst := netip.MustParsePrefix("192.168.3.0/24")
	hasNew := func(pols []spd.Policy) bool {
		for _, p := range pols {
			if p.Sel.Dst == newDst {
				return true
			}
		}
		return false
	}

	veto := errors.New("the interface cannot start")
	var created *sa
	err := e.ApplyThen(context.Background(), parse(t, next), func(pols []spd.Policy) error {
		if !hasNew(pols) {
			t.Error("prepare does not see the new policy")
		}
		if hasNew(e.Policies()) || len(e.SAs()) != 2 {
			t.Error("the new configuration is installed before prepare returned")
		}
		if p := sendOne(t, e, pool); p.Seq != 2 {
			t.Errorf("during prepare: seq %d, %v", p.Seq, p.Drop)
		}
		return veto
	})
	if !errors.Is(err, veto) {
		t.Fatalf("ApplyThen = %v, want the veto", err)
	}
	if hasNew(e.Policies()) || len(e.SAs()) != 2 || e.sad.Load().bySPI[0x3001] != nil {
		t.Fatalf("vetoed configuration installed: %d SAs, policies %v", len(e.SAs()), e.Policies())
	}
	if e.sad.Load().bySPI[0x1001][0] != kept || kept.state.Load() != stateMature {
		t.Fatal("vetoed configuration replaced or closed the kept SA")
	}
	if p := sendOne(t, e, pool); p.Seq != 3 {
		t.Fatalf("after the veto: seq %d", p.Seq)
	}

	// The same configuration without veto: installed, kept SA continues.
	err = e.ApplyThen(context.Background(), parse(t, next), func(pols []spd.Policy) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if !hasNew(e.Policies()) || len(e.SAs()) != 3 {
		t.Fatalf("not installed: %d SAs", len(e.SAs()))
	}
	created = e.sad.Load().bySPI[0x3001][0]
	if created.bind == nil || e.sad.Load().bySPI[0x1001][0] != kept {
		t.Fatal("SAs not bound / kept SA replaced")
	}
	if p := sendOne(t, e, pool); p.Seq != 4 {
		t.Fatalf("after the commit: seq %d", p.Seq)
	}
	// A veto of a configuration that removes an SA keeps it open.
	err = e.ApplyThen(context.Background(), parse(t, strings.Replace(next, "0x3001", "0x3002", 1)), func([]spd.Policy) error { return veto })
	if !errors.Is(err, veto) || created.state.Load() != stateMature || e.sad.Load().bySPI[0x3001] == nil {
		t.Fatalf("veto of a removal: %v, state %d", err, created.state.Load())
	}
}
