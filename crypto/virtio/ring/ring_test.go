package ring

import (
	"testing"
	"unsafe"
)

func alignedMem(n int) []byte {
	b := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), n)
}

func TestLayout(t *testing.T) {
	for _, size := range []uint16{2, 4, 256, 32768} {
		l, err := LayoutAt(100, size)
		if err != nil {
			t.Fatal(err)
		}
		n := int(size)
		if l.Desc%16 != 0 || l.Avail != l.Desc+16*n || l.Used%4 != 0 || l.Used < l.Avail+6+2*n+2 || l.End < l.Used+6+8*n+2 || l.End%8 != 0 {
			t.Fatalf("size %d: bad layout %+v", size, l)
		}
	}
	for _, bad := range []uint16{0, 1, 3, 100} {
		if _, err := LayoutAt(0, bad); err == nil {
			t.Fatalf("size %d accepted", bad)
		}
	}
}

// TestPingPongWraps runs a driver and a device side over one queue for
// more than 2^16 requests, so that the free-running indices wrap, and
// checks that every head comes back once, in order.
func TestPingPongWraps(t *testing.T) {
	l, _ := LayoutAt(0, 8)
	mem := alignedMem(l.End)
	drv, err := New(mem, l)
	if err != nil {
		t.Fatal(err)
	}
	dev, _ := New(mem, l)
	var availIdx, lastAvail, usedIdx, lastUsed uint16
	const total = 70000
	sent, got := 0, 0
	for got < total {
		// Driver: publish up to 4 requests (two descriptors each).
		for k := 0; k < 4 && sent < total && int(availIdx-lastUsed) < 4; k++ {
			head := uint16(2 * (sent % 4))
			drv.SetDesc(head, Desc{Addr: uint64(sent), Len: 1, Flags: DescFNext, Next: head + 1})
			drv.SetDesc(head+1, Desc{Addr: uint64(sent), Len: 1, Flags: DescFWrite})
			drv.SetAvail(availIdx, head)
			availIdx++
			sent++
		}
		drv.PublishAvail(availIdx)
		// Device: consume everything.
		for a := dev.AvailIdx(); lastAvail != a; lastAvail++ {
			h := dev.Avail(lastAvail)
			d := dev.Desc(h)
			if d.Flags&DescFNext == 0 || dev.Desc(d.Next).Flags&DescFWrite == 0 {
				t.Fatal("bad chain")
			}
			dev.SetUsed(usedIdx, uint32(h), uint32(d.Addr))
			usedIdx++
		}
		dev.PublishUsed(usedIdx)
		// Driver: reap in order.
		for u := drv.UsedIdx(); lastUsed != u; lastUsed++ {
			id, n := drv.Used(lastUsed)
			if int(n) != got || id != uint32(2*(got%4)) {
				t.Fatalf("used %d: id %d len %d", got, id, n)
			}
			got++
		}
	}
	if int(availIdx) != total%65536 || int(usedIdx) != total%65536 {
		t.Fatalf("indices %d %d", availIdx, usedIdx)
	}
}

func TestFlagsAndEventsDoNotClobber(t *testing.T) {
	l, _ := LayoutAt(0, 16)
	mem := alignedMem(l.End)
	q, _ := New(mem, l)
	q.PublishAvail(0xfffe)
	q.SetAvailFlags(AvailFNoInterrupt)
	q.PublishUsed(0x1234)
	q.SetUsedFlags(UsedFNoNotify)
	q.SetUsedEvent(0xabcd)
	q.SetAvailEvent(0x4321)
	if q.AvailIdx() != 0xfffe || q.AvailFlags() != AvailFNoInterrupt || q.UsedIdx() != 0x1234 || q.UsedFlags() != UsedFNoNotify ||
		q.UsedEvent() != 0xabcd || q.AvailEvent() != 0x4321 {
		t.Fatal("16-bit fields interfere")
	}
}

func TestNeedEvent(t *testing.T) {
	tests := []struct {
		event, newIdx, old uint16
		want               bool
	}{
		{5, 6, 5, true},           // crossed the event index
		{5, 5, 4, false},          // not yet
		{4, 10, 5, false},         // event before old: already notified
		{0xffff, 1, 0xfffe, true}, // across the wrap
		{3, 3, 3, false},          // nothing new
	}
	for _, tc := range tests {
		if got := NeedEvent(tc.event, tc.newIdx, tc.old); got != tc.want {
			t.Errorf("NeedEvent(%d, %d, %d) = %v", tc.event, tc.newIdx, tc.old, got)
		}
	}
}

func TestHostileIndicesStayInBounds(t *testing.T) {
	l, _ := LayoutAt(0, 4)
	mem := alignedMem(l.End)
	q, _ := New(mem, l)
	for i := 0; i < 1<<16; i += 997 {
		q.Desc(uint16(i))
		q.Avail(uint16(i))
		q.Used(uint16(i))
	}
	if _, err := New(mem[:l.End-1], l); err == nil {
		t.Fatal("short region accepted")
	}
}
