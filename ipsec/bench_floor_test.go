package ipsec

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"encoding/hex"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
)

// BenchmarkRatioFloor decomposes BenchmarkRatio's AES-128-GCM figures:
// the same interleaved, thread-CPU-time measurement against the same raw
// baseline, with the ESP side replaced by successively more of the real
// path, so that each layer's cost shows as a drop of esp/raw:
//
//   - layout: the ESP packet filled into a pool packet (outer header, ESP
//     header and IV before the data, as Inbound receives it; the
//     plaintext as Outbound receives it) and the stdlib AEAD called
//     directly on it, nonce and AAD taken from the packet: no engine, no
//     framework;
//   - provider: as layout, but through crypto.Requests and one Submit
//     per batch to an aesni session (cpuprov), without a Binding;
//   - binding: as provider, through a crypto.Binding of the framework;
//   - minimal (decap only): binding plus the least an ESP receiver must
//     do, written inline: outer header, SPI, replay check before and
//     update after the ICV, trailer and padding, inner header. No policy
//     check, counters or drop accounting.
//
// BenchmarkRatio's esp/raw is the full engine on top of binding.
func BenchmarkRatioFloor(b *testing.B) {
	key, err := hex.DecodeString(strings.TrimPrefix(hexKey(20, 1), "0x")) // transforms[0]
	if err != nil {
		b.Fatal(err)
	}
	blk, _ := aes.NewCipher(key[:16])
	gcm, _ := cipher.NewGCM(blk)
	sp := crypto.SessionParams{Alg: crypto.Algorithm{Cipher: crypto.CipherAESGCM, KeyBits: 128}, CipherKey: key}
	for _, dir := range []string{"encap", "decap"} {
		for _, layer := range []string{"layout", "provider", "binding", "minimal"} {
			if dir == "encap" && layer == "minimal" {
				continue
			}
			b.Run(dir+"/"+layer, func(b *testing.B) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				bp := newBenchPair(b, 0)
				fillSeal, seal, fillOpen, open, _ := rawOps(b, "aes-128-gcm")
				rawFill, rawOp := fillSeal, seal
				if dir == "decap" {
					rawFill, rawOp = fillOpen, open
				}
				ps := make([]*Packet, benchBatch)
				raw := make([][]byte, benchBatch)
				for i := range ps {
					ps[i] = bp.pool.Get()
					raw[i] = bp.pool.Get().buf[Headroom-24:]
				}
				s, w := bp.in, bp.in.win
				var submit func([]*crypto.Request) int
				delivered := 0
				done := func(rs []*crypto.Request) { delivered += len(rs) }
				if layer == "minimal" {
					done = func(rs []*crypto.Request) { delivered += minimalFinish(s, rs) }
				}
				switch layer {
				case "provider":
					sess, err := aesni.New().NewSession(sp, done)
					if err != nil {
						b.Fatal(err)
					}
					submit = sess.Submit
				case "binding", "minimal":
					bd, err := testFramework(b).Bind(sp, done)
					if err != nil {
						b.Fatal(err)
					}
					submit = bd.Submit
				}
				reqs := make([]*crypto.Request, 0, benchBatch)
				var nonce [12]byte
				copy(nonce[:4], key[16:])
				var seq uint64
				espBatch := func() {
					reqs = reqs[:0]
					delivered = 0
					if dir == "encap" {
						for _, p := range ps {
							p.SetData(bp.plain)
						}
						for _, p := range ps {
							// ESP header and IV in the headroom, trailer
							// after the data (1420 + 2 + 2 = 1424).
							seq++
							buf := p.buf
							h := buf[p.off-16 : p.off]
							put32(h, 0x1001)
							put32(h[4:], uint32(seq))
							put64(h[8:], seq)
							end := p.end
							buf[end], buf[end+1], buf[end+2], buf[end+3] = 1, 2, 2, protoIPIP
							if layer == "layout" {
								copy(nonce[4:], h[8:16])
								gcm.Seal(buf[p.off:p.off], nonce[:], buf[p.off:end+4], h[:8])
								continue
							}
							setReq(&p.req, p, crypto.Encrypt, buf[p.off:end+4], buf[end+4:end+20], h[8:16])
							p.req.AAD = h[:8]
							reqs = append(reqs, &p.req)
						}
					} else {
						for j, p := range ps {
							p.SetData(bp.wire[j])
						}
						if layer == "minimal" {
							s.mu.Lock()
							w.Reset()
						}
						for _, p := range ps {
							d := p.buf[p.off:p.end]
							if layer == "minimal" {
								// Outer IPv4 header and SPI, replay check.
								if len(d) < 64 || d[0] != 0x45 || d[9] != protoESP || binary.BigEndian.Uint32(d[20:]) != 0x1001 {
									continue
								}
								p.Seq = uint64(binary.BigEndian.Uint32(d[24:]))
								if !w.Check(p.Seq) {
									continue
								}
							}
							esp := d[20:]
							n := len(esp)
							if layer == "layout" {
								copy(nonce[4:], esp[8:16])
								if _, err := gcm.Open(esp[16:16], nonce[:], esp[16:], esp[:8]); err != nil {
									b.Fatal(err)
								}
								continue
							}
							setReq(&p.req, p, crypto.Decrypt, esp[16:n-16], esp[n-16:], esp[8:16])
							p.req.AAD = esp[:8]
							reqs = append(reqs, &p.req)
						}
						if layer == "minimal" {
							s.mu.Unlock()
						}
					}
					if layer != "layout" {
						if submit(reqs) != len(reqs) || delivered != len(reqs) {
							b.Fatalf("submitted %d, delivered %d", len(reqs), delivered)
						}
					}
				}
				ratioLoop(b, func() {
					for _, p := range raw {
						rawFill(p)
					}
					for _, p := range raw {
						rawOp(p)
					}
				}, espBatch)
				if layer != "layout" {
					for _, p := range ps {
						if p.req.Status != crypto.StatusOK {
							b.Fatal(p.req.Status)
						}
					}
				}
			})
		}
	}
}

// minimalFinish is the receiver's least work after the AEAD verified:
// replay window update, trailer and padding, inner IPv4 header. It
// returns how many requests it saw.
func minimalFinish(s *sa, rs []*crypto.Request) int {
	s.mu.Lock()
	for _, r := range rs {
		p := r.User.(*Packet)
		if r.Status != crypto.StatusOK || !s.win.Update(p.Seq) {
			p.Drop = DropReplay
		}
	}
	s.mu.Unlock()
	for _, r := range rs {
		p := r.User.(*Packet)
		if p.Drop != DropNone {
			continue
		}
		buf := p.buf
		ctEnd := p.end - 16
		nh, pad := buf[ctEnd-1], int(buf[ctEnd-2])
		ps := p.espoff + 16
		if pad+2 > ctEnd-ps || nh != protoIPIP {
			continue
		}
		good := true
		for i, c := range buf[ctEnd-2-pad : ctEnd-2] {
			good = good && int(c) == i+1
		}
		d := buf[ps : ctEnd-2-pad]
		if !good || len(d) < 24 || d[0] != 0x45 {
			continue
		}
		tot := int(binary.BigEndian.Uint16(d[2:]))
		if tot < 24 || tot > len(d) {
			continue
		}
		p.off, p.end = ps, ps+tot
		p.Verdict = VerdictForward
	}
	return len(rs)
}

// ratioReps is the number of batches per timed interval of
// interleaveCPU: it amortises the clock_gettime syscall.
const ratioReps = 8

// interleaveCPU runs first and second alternately, ratioReps calls per
// timed interval, b.N intervals each, and returns the thread CPU time
// each of them took in total. Each interval runs at the next of the
// stackPositions stack positions (stackShift), the same for both sides,
// so the totals average over stack positions (see stackshift_test.go).
// The caller has locked the goroutine to its thread.
func interleaveCPU(b *testing.B, first, second func()) (t1st, t2nd time.Duration) {
	interval := func() {
		t0 := threadCPU()
		for range ratioReps {
			first()
		}
		t1 := threadCPU()
		for range ratioReps {
			second()
		}
		t2 := threadCPU()
		t1st += t1 - t0
		t2nd += t2 - t1
	}
	// Grow the goroutine's stack to its deepest before timing.
	stackShift(stackPositions-1, func() {})
	b.ResetTimer()
	k := 0
	for range b.N {
		stackShift(k, interval)
		k = (k + stackStride) % stackPositions
	}
	b.StopTimer()
	return t1st, t2nd
}

// ratioLoop runs BenchmarkRatio's measurement: rawBatch and espBatch
// interleaved (interleaveCPU), and reports esp/raw and each side's ns per
// packet.
func ratioLoop(b *testing.B, rawBatch, espBatch func()) {
	tRaw, tESP := interleaveCPU(b, rawBatch, espBatch)
	n := float64(b.N * benchBatch * ratioReps)
	b.ReportMetric(float64(tRaw)/float64(tESP), "esp/raw")
	b.ReportMetric(float64(tESP)/n, "esp-ns/pkt")
	b.ReportMetric(float64(tRaw)/n, "raw-ns/pkt")
	b.ReportMetric(benchSize*n/float64(tESP)*1e9/1e6, "esp-MB/s")
}
