package devslot

import (
	"errors"
	"testing"
)

type prov struct{ name string }

func TestSlot(t *testing.T) {
	busy := errors.New("busy")
	boom := errors.New("boom")
	var s Slot[string, *prov]
	s.Configure("opts-1")
	if s.Current() != nil {
		t.Fatal("new slot is not empty")
	}
	if _, err := s.Fill(busy, func(string) (*prov, error) { return nil, boom }); !errors.Is(err, boom) || s.Current() != nil {
		t.Fatalf("failed create: err %v, current %v", err, s.Current())
	}
	p1, err := s.Fill(busy, func(o string) (*prov, error) { return &prov{o}, nil })
	if err != nil || p1.name != "opts-1" || s.Current() != p1 {
		t.Fatalf("fill: %v %v", p1, err)
	}
	if _, err := s.Fill(busy, func(string) (*prov, error) { t.Fatal("create ran on a full slot"); return nil, nil }); !errors.Is(err, busy) {
		t.Fatalf("second fill: %v, want busy", err)
	}
	s.Release(&prov{"stale"})
	if s.Current() != p1 {
		t.Fatal("a stale release emptied the slot")
	}
	s.Release(p1)
	if s.Current() != nil {
		t.Fatal("release left the slot full")
	}
	s.Configure("opts-2")
	if p2, err := s.Fill(busy, func(o string) (*prov, error) { return &prov{o}, nil }); err != nil || p2.name != "opts-2" {
		t.Fatalf("refill: %v %v", p2, err)
	}
}
