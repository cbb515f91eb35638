package spec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/keelinit/keel/crypto/virtio/ring"
)

// checkRegion verifies Layout's contract for r: one queue per data queue
// plus the control queue, each ring inside the region with the virtio
// split-ring sizes and alignments, slots after their ring, nothing
// overlapping, and a page-multiple Size within MaxRegionSize.
func checkRegion(c Config, r Region) error {
	if r.Cfg != c {
		return fmt.Errorf("region config %+v, want %+v", r.Cfg, c)
	}
	if len(r.Queues) != c.DataQueues+1 {
		return fmt.Errorf("%d queues for %d data queues", len(r.Queues), c.DataQueues)
	}
	if r.Size <= 0 || r.Size > MaxRegionSize || r.Size%4096 != 0 {
		return fmt.Errorf("size %d: not a page multiple in (0, %d]", r.Size, MaxRegionSize)
	}
	end := 0 // end of the previous queue's slots
	for i, q := range r.Queues {
		size, slot, minSlot := c.QueueSize, q.SlotSize, dataSlotSize(c.MaxData)
		if i == c.DataQueues {
			size, minSlot = c.CtrlQueueSize, CtrlSlotSize
		}
		n := int(size)
		l := q.Ring
		switch {
		case l.Size != size || q.Slots != n/2:
			return fmt.Errorf("queue %d: ring size %d with %d slots, want %d and %d", i, l.Size, q.Slots, size, n/2)
		case l.Desc < end:
			return fmt.Errorf("queue %d: ring at %d overlaps the previous queue ending at %d", i, l.Desc, end)
		case l.Desc%16 != 0 || l.Avail%2 != 0 || l.Used%4 != 0 || q.SlotBase%64 != 0:
			return fmt.Errorf("queue %d: misaligned parts %+v, slots at %d", i, l, q.SlotBase)
		case l.Avail-l.Desc < 16*n || l.Used-l.Avail < 6+2*n || l.End-l.Used < 6+8*n:
			return fmt.Errorf("queue %d: ring parts %+v too small for %d descriptors", i, l, n)
		case q.SlotBase < l.End:
			return fmt.Errorf("queue %d: slots at %d overlap the ring ending at %d", i, q.SlotBase, l.End)
		case slot < minSlot || slot%128 != 0:
			return fmt.Errorf("queue %d: slot size %d, want a multiple of 128 of at least %d", i, slot, minSlot)
		}
		end = q.Slot(q.Slots)
		if end > r.Size {
			return fmt.Errorf("queue %d: slots end at %d beyond the %d-byte region", i, end, r.Size)
		}
	}
	return nil
}

func TestLayout(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // substring; "" means accepted
		tooBig  bool
	}{
		{"defaults", Config{DataQueues: 2, QueueSize: 256, CtrlQueueSize: 128, MaxData: 16384}, "", false},
		{"smallest", Config{DataQueues: 1, QueueSize: 2, CtrlQueueSize: 2, MaxData: 64}, "", false},
		{"largest useful", Config{DataQueues: 16, QueueSize: 512, CtrlQueueSize: ring.MaxSize, MaxData: 65536}, "", false},
		{"many slots small data", Config{DataQueues: 16, QueueSize: 2048, CtrlQueueSize: 128, MaxData: 16384}, "", false},
		{"one deep queue", Config{DataQueues: 1, QueueSize: ring.MaxSize, CtrlQueueSize: 2, MaxData: 64}, "", false},
		{"one slot of max data", Config{DataQueues: 1, QueueSize: 2, CtrlQueueSize: 2, MaxData: 1 << 20}, "", false},
		{"every limit at maximum", Config{DataQueues: 16, QueueSize: ring.MaxSize, CtrlQueueSize: ring.MaxSize, MaxData: 1 << 20}, "549898420224 bytes", true},
		{"just over the cap", Config{DataQueues: 16, QueueSize: 4096, CtrlQueueSize: 128, MaxData: 16384}, "above the 1073741824-byte cap", true},
		{"deep queues big data", Config{DataQueues: 2, QueueSize: 1024, CtrlQueueSize: 128, MaxData: 1 << 20}, "2 data queues of 1024 descriptors", true},
		{"no data queues", Config{DataQueues: 0, QueueSize: 256, CtrlQueueSize: 128, MaxData: 16384}, "0 data queues", false},
		{"17 data queues", Config{DataQueues: 17, QueueSize: 256, CtrlQueueSize: 128, MaxData: 16384}, "17 data queues", false},
		{"max data too small", Config{DataQueues: 1, QueueSize: 256, CtrlQueueSize: 128, MaxData: 63}, "max data 63", false},
		{"max data too large", Config{DataQueues: 1, QueueSize: 2, CtrlQueueSize: 2, MaxData: 1<<20 + 1}, "max data 1048577", false},
		{"queue size not a power of two", Config{DataQueues: 1, QueueSize: 100, CtrlQueueSize: 128, MaxData: 16384}, "data queue: ring: queue size 100", false},
		{"queue size zero", Config{DataQueues: 1, QueueSize: 0, CtrlQueueSize: 128, MaxData: 16384}, "data queue: ring: queue size 0", false},
		{"control queue size one", Config{DataQueues: 1, QueueSize: 2, CtrlQueueSize: 1, MaxData: 64}, "control queue: ring: queue size 1", false},
		{"queue size above the ring maximum", Config{DataQueues: 1, QueueSize: 65535, CtrlQueueSize: 2, MaxData: 64}, "queue size 65535", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := tt.cfg.Layout()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Layout: %v", err)
				}
				if err := checkRegion(tt.cfg, r); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Layout accepted %+v (size %d)", tt.cfg, r.Size)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %q does not mention %q", err, tt.wantErr)
			}
			if got := errors.Is(err, ErrRegionTooLarge); got != tt.tooBig {
				t.Fatalf("errors.Is(%q, ErrRegionTooLarge) = %v, want %v", err, got, tt.tooBig)
			}
		})
	}
}

// TestLayoutCapBoundary finds, for one queue shape, the largest MaxData
// Layout accepts and checks that one more byte of slot is refused: the cap
// is on the region's actual size, not on an approximation.
func TestLayoutCapBoundary(t *testing.T) {
	c := Config{DataQueues: 16, QueueSize: 1024, CtrlQueueSize: 128}
	lo, hi := 64, 1<<20 // lo accepted, hi refused
	for hi-lo > 1 {
		c.MaxData = (lo + hi) / 2
		if _, err := c.Layout(); err == nil {
			lo = c.MaxData
		} else {
			hi = c.MaxData
		}
	}
	c.MaxData = lo
	r, err := c.Layout()
	if err != nil {
		t.Fatal(err)
	}
	if err := checkRegion(c, r); err != nil {
		t.Fatal(err)
	}
	// One more byte of MaxData grows every slot by 128 bytes past the cap.
	c.MaxData = hi
	if _, err := c.Layout(); !errors.Is(err, ErrRegionTooLarge) {
		t.Fatalf("MaxData %d: %v, want ErrRegionTooLarge", hi, err)
	}
	// So the largest accepted region is within one such step (16 queues
	// of 512 slots of 128 more bytes) and a page of the cap.
	if gap := MaxRegionSize - r.Size; gap < 0 || gap > 16*512*128+4096 {
		t.Fatalf("largest accepted region %d is %d bytes below the cap %d", r.Size, gap, MaxRegionSize)
	}
}

// TestCheckRegion shows that checkRegion, the invariant the fuzz target
// asserts, catches broken layouts.
func TestCheckRegion(t *testing.T) {
	c := Config{DataQueues: 2, QueueSize: 8, CtrlQueueSize: 4, MaxData: 64}
	good, err := c.Layout()
	if err != nil {
		t.Fatal(err)
	}
	if err := checkRegion(c, good); err != nil {
		t.Fatalf("valid layout: %v", err)
	}
	breakers := map[string]func(r *Region){
		"missing queue": func(r *Region) { r.Queues = r.Queues[:2] },
		"ring overlaps": func(r *Region) {
			r.Queues[1].Ring.Desc = r.Queues[0].Ring.Desc
			r.Queues[1].Ring.Avail = r.Queues[0].Ring.Avail
		},
		"slots over ring":     func(r *Region) { r.Queues[0].SlotBase = r.Queues[0].Ring.Used },
		"slots beyond size":   func(r *Region) { r.Size = 4096; r.Queues[2].SlotBase = 8192 },
		"size over the cap":   func(r *Region) { r.Size = MaxRegionSize + 4096 },
		"size not a page":     func(r *Region) { r.Size++ },
		"slot too small":      func(r *Region) { r.Queues[0].SlotSize = 128 },
		"too few slots":       func(r *Region) { r.Queues[1].Slots-- },
		"used ring too short": func(r *Region) { r.Queues[2].Ring.End = r.Queues[2].Ring.Used + 8 },
	}
	for name, brk := range breakers {
		r := good
		r.Queues = append([]QueueRegion(nil), good.Queues...)
		brk(&r)
		if err := checkRegion(c, r); err == nil {
			t.Errorf("%s: checkRegion accepted %+v", name, r)
		}
	}
}

func setupMsg(dataQueues uint32, queueSize, ctrlSize uint16, maxData, maxSessions uint32) []byte {
	b := make([]byte, 24)
	binary.LittleEndian.PutUint32(b[0:], MsgSetup)
	binary.LittleEndian.PutUint32(b[4:], Magic)
	binary.LittleEndian.PutUint32(b[8:], dataQueues)
	binary.LittleEndian.PutUint16(b[12:], queueSize)
	binary.LittleEndian.PutUint16(b[14:], ctrlSize)
	binary.LittleEndian.PutUint32(b[16:], maxData)
	binary.LittleEndian.PutUint32(b[20:], maxSessions)
	return b
}

func TestDecodeSetup(t *testing.T) {
	def := Config{DataQueues: 2, QueueSize: 256, CtrlQueueSize: 128, MaxData: 16384, MaxSessions: 3}
	wrongType := EncodeSetup(def)
	binary.LittleEndian.PutUint32(wrongType, MsgStats)
	wrongMagic := EncodeSetup(def)
	wrongMagic[7] ^= 0xff
	tests := []struct {
		name    string
		in      []byte
		want    Config
		wantErr string
	}{
		{"round trip", EncodeSetup(def), def, ""},
		{"trailing bytes ignored", append(EncodeSetup(def), 1, 2, 3), def, ""},
		{"empty", nil, Config{}, "0 bytes, want 24"},
		{"short", EncodeSetup(def)[:23], Config{}, "23 bytes, want 24"},
		{"wrong type", wrongType, Config{}, "type 4, want 1"},
		{"wrong magic", wrongMagic, Config{}, "magic"},
		{"region too large", setupMsg(16, 32768, 32768, 1<<20, 0), Config{}, "cap"},
		{"data queues wrap", setupMsg(1<<32-1, 2, 2, 64, 0), Config{}, "data queues"},
		{"max data wraps", setupMsg(1, 2, 2, 1<<31, 0), Config{}, "max data"},
		{"max sessions wraps", setupMsg(1, 2, 2, 64, 1<<31), Config{}, "max sessions 2147483648"},
		{"bad queue size", setupMsg(1, 3, 2, 64, 0), Config{}, "queue size 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeSetup(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("DecodeSetup = %+v, %v; want an error mentioning %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("DecodeSetup = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
	if _, err := DecodeSetup(setupMsg(16, 32768, 32768, 1<<20, 0)); !errors.Is(err, ErrRegionTooLarge) {
		t.Fatalf("oversized region: %v, want ErrRegionTooLarge", err)
	}
}

// FuzzDecodeSetup: the device decodes the setup message another process
// wrote and maps the region it describes. No input may panic; a message
// DecodeSetup accepts has a layout within MaxRegionSize whose rings and
// slots lie inside the region without overlapping, and it round-trips
// through EncodeSetup.
func FuzzDecodeSetup(f *testing.F) {
	f.Add(EncodeSetup(Config{DataQueues: 2, QueueSize: 256, CtrlQueueSize: 128, MaxData: 16384}))
	f.Add(EncodeSetup(Config{DataQueues: 16, QueueSize: 512, CtrlQueueSize: 32768, MaxData: 65536, MaxSessions: 65536}))
	f.Add(setupMsg(16, 32768, 32768, 1<<20, 0))
	f.Add(setupMsg(1, 2, 2, 64, 1))
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := DecodeSetup(in)
		if err != nil {
			if c != (Config{}) {
				t.Fatalf("error %v with a non-zero config %+v", err, c)
			}
			return
		}
		r, err := c.Layout()
		if err != nil {
			t.Fatalf("DecodeSetup accepted %+v that Layout refuses: %v", c, err)
		}
		if err := checkRegion(c, r); err != nil {
			t.Fatalf("config %+v: %v", c, err)
		}
		if out := EncodeSetup(c); string(out) != string(in[:24]) {
			t.Fatalf("round trip: %x != %x", out, in[:24])
		}
	})
}
