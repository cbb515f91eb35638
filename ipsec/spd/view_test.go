package spd

import "testing"

// TestViewKeepsGeneration: a View answers from its generation after the
// SPD changed (the same flows, cached under the new generation, get the
// new answers), and the zero View has no policies.
func TestViewKeepsGeneration(t *testing.T) {
	s := New()
	f := Flow{Src: addr("10.0.0.1"), Dst: addr("10.0.1.1"), Proto: 6, SrcPort: 1000, DstPort: 22}
	sel := Selector{Src: pfx("10.0.0.0/24"), Dst: pfx("10.0.1.0/24")}
	if err := s.Replace([]Policy{{Dir: DirOut, Sel: sel, Action: None}}); err != nil {
		t.Fatal(err)
	}
	v1 := s.View()
	if err := s.Replace([]Policy{{Dir: DirOut, Sel: sel, Action: Discard}}); err != nil {
		t.Fatal(err)
	}
	v2 := s.View()
	if v1.Generation() >= v2.Generation() || v2.Generation() != s.Generation() {
		t.Fatalf("generations %d, %d, SPD %d", v1.Generation(), v2.Generation(), s.Generation())
	}
	for range 3 { // the second and third lookups hit the flow cache
		p1, ok1 := v1.Lookup(DirOut, f)
		p2, ok2 := v2.Lookup(DirOut, f)
		p3, ok3 := s.Lookup(DirOut, f)
		if !ok1 || !ok2 || !ok3 || p1.Action != None || p2.Action != Discard || p3.Action != Discard {
			t.Fatalf("old view %v %v, new view %v %v, SPD %v %v", p1, ok1, p2, ok2, p3, ok3)
		}
	}
	if p, ok := (View{}).Lookup(DirOut, f); ok || p != nil || (View{}).Generation() != 0 {
		t.Fatalf("zero View: %v %v", p, ok)
	}
}
