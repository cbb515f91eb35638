package espcap

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/keelinit/keel/internal/testwait"
	"github.com/keelinit/keel/ipsec"
	"github.com/keelinit/keel/ipsec/setkey"
)

// fuzzEngine returns a fresh engine for case i/2 of interopCases that
// encrypts A->B (even i) or decrypts it (odd i). Each fuzz execution gets
// its own engine, so coverage does not depend on earlier executions
// (replay windows, sequence counters) and minimisation converges.
func fuzzEngine(tb testing.TB, i int) *ipsec.Engine {
	tb.Helper()
	c := interopCases[i/2]
	dir := "out"
	if i%2 == 1 {
		dir = "in"
	}
	cfg, err := setkey.Parse(c.name+"-"+dir+".conf", strings.NewReader(c.config(dir)))
	if err != nil {
		tb.Fatal(err)
	}
	e := ipsec.NewEngine(testFramework(tb), ipsec.Options{})
	if err := e.Apply(context.Background(), cfg); err != nil {
		tb.Fatal(err)
	}
	return e
}

// numFuzzEngines is how many engines fuzzEngine can build.
var numFuzzEngines = 2 * len(interopCases)

// pcapOf writes records (raw link-layer bytes) as a pcap of link type lt.
func pcapOf(tb testing.TB, lt layers.LinkType, recs ...[]byte) []byte {
	tb.Helper()
	var b bytes.Buffer
	w := pcapgo.NewWriter(&b)
	if err := w.WriteFileHeader(65535, lt); err != nil {
		tb.Fatal(err)
	}
	for i, r := range recs {
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(1700000000+int64(i), 0), CaptureLength: len(r), Length: len(r)}
		if err := w.WritePacket(ci, r); err != nil {
			tb.Fatal(err)
		}
	}
	return b.Bytes()
}

// pcapngOf writes records as a pcapng whose interface i has link type
// lts[i]; record j is on interface j % len(lts).
func pcapngOf(tb testing.TB, lts []layers.LinkType, recs ...[]byte) []byte {
	tb.Helper()
	var b bytes.Buffer
	w, err := pcapgo.NewNgWriter(&b, lts[0])
	if err != nil {
		tb.Fatal(err)
	}
	for _, lt := range lts[1:] {
		intf := pcapgo.DefaultNgInterface
		intf.LinkType = lt
		if _, err := w.AddInterface(intf); err != nil {
			tb.Fatal(err)
		}
	}
	for i, r := range recs {
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(1700000000+int64(i), 0), CaptureLength: len(r), Length: len(r), InterfaceIndex: i % len(lts)}
		if err := w.WritePacket(ci, r); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

// ipv4UDP is an IPv4/UDP packet hostA->hostB with n payload bytes.
func ipv4UDP(tb testing.TB, n int) []byte {
	tb.Helper()
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: hostA.AsSlice(), DstIP: hostB.AsSlice()}
	u := &layers.UDP{SrcPort: 5000, DstPort: 6000}
	_ = u.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		ip, u, gopacket.Payload(bytes.Repeat([]byte{0x5a}, n))); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// fuzzSeeds are plaintext captures in every supported link type (and a
// two-interface pcapng), the same
// packets encrypted by each case's outbound engine (valid ESP for its
// inbound engine), and malformed files.
func fuzzSeeds(tb testing.TB) []struct {
	eng  uint8
	data []byte
} {
	eth := []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00}
	vlan := []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x81, 0x00, 0, 5, 0x08, 0x00}
	sll := make([]byte, 16)
	binary.BigEndian.PutUint16(sll[14:], 0x0800)
	null := []byte{2, 0, 0, 0}
	p1, p2 := ipv4UDP(tb, 10), ipv4UDP(tb, 1200)
	plain := [][]byte{
		pcapOf(tb, layers.LinkTypeEthernet, append(eth[:14:14], p1...), append(vlan[:18:18], p2...), []byte{1, 2, 3}),
		pcapOf(tb, layers.LinkTypeRaw, p1, p2),
		pcapOf(tb, layers.LinkTypeLinuxSLL, append(sll[:16:16], p1...)),
		pcapOf(tb, layers.LinkTypeNull, append(null[:4:4], p2...)),
		pcapngOf(tb, []layers.LinkType{layers.LinkTypeEthernet, layers.LinkTypeRaw}, append(eth[:14:14], p1...), p2, append(eth[:14:14], p2...)),
	}
	var out []struct {
		eng  uint8
		data []byte
	}
	for i := 0; i < numFuzzEngines; i += 2 {
		e := fuzzEngine(tb, i)
		defer func() { e.Close(testwait.Context(tb)) }()
		for _, p := range plain {
			out = append(out, struct {
				eng  uint8
				data []byte
			}{uint8(i), p})
			var enc bytes.Buffer
			if _, err := Process(e, Encrypt, bytes.NewReader(p), &enc); err != nil {
				tb.Fatal(err)
			}
			out = append(out, struct {
				eng  uint8
				data []byte
			}{uint8(i + 1), enc.Bytes()})
		}
	}
	ng := plain[len(plain)-1] // the pcapng: cut in its last record, and in its interface blocks
	for _, bad := range [][]byte{nil, []byte("not a pcap"), plain[0][:30], pcapOf(tb, layers.LinkTypeIEEE802_11, p1), ng[:len(ng)-10], ng[:40]} {
		out = append(out, struct {
			eng  uint8
			data []byte
		}{1, bad})
	}
	return out
}

// FuzzProcess: whatever the capture file (header, link type, records, ESP
// inside), Process never panics, accounts for every record it read
// (written + dropped), and writes a pcap that reads back with exactly the
// records it reports written. The input selects the engine (direction and
// transform: plain ESP and ESP-in-UDP, CBC+HMAC, GCM, ChaCha20-Poly1305,
// ESN). A hang (10 s) fails too. Seed corpus: testdata/fuzz/FuzzProcess
// plus fuzzSeeds. Each execution builds its engine, and coverage still
// varies a little with goroutine scheduling, so run it with a short
// minimisation budget or minimisation eats the whole run:
//
//	go test -run='^$' -fuzz=FuzzProcess -fuzztime=30s -fuzzminimizetime=2s ./ipsec/espcap
func FuzzProcess(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s.eng, s.data)
	}
	f.Fuzz(func(t *testing.T, eng uint8, data []byte) {
		i := int(eng) % numFuzzEngines
		e := fuzzEngine(t, i)
		defer func() { e.Close(testwait.Context(t)) }()
		d := Encrypt
		if i%2 == 1 {
			d = Decrypt
		}
		var out bytes.Buffer
		type result struct {
			res *Result
			err error
		}
		ch := make(chan result, 1)
		go func() {
			res, err := Process(e, d, bytes.NewReader(data), &out)
			ch <- result{res, err}
		}()
		var r result
		select {
		case r = <-ch:
		case <-time.After(10 * time.Second):
			// A hang is a failure too: report it (with every goroutine)
			// so that the fuzzer saves the input.
			buf := make([]byte, 1<<20)
			t.Fatalf("Process hung on a %d-byte input (engine %d)\n%s", len(data), i, buf[:runtime.Stack(buf, true)])
		}
		res, err := r.res, r.err
		var trunc *TruncatedError
		if err != nil && !errors.As(err, &trunc) {
			return
		}
		// A truncated capture still wrote every record it read.
		if res.Read != res.Written+res.Dropped {
			t.Fatalf("read %d records, wrote %d, dropped %d", res.Read, res.Written, res.Dropped)
		}
		rd, err := newCaptureReader(&out)
		if err != nil {
			t.Fatalf("output is not a capture: %v", err)
		}
		if rd.format != res.Format {
			t.Fatalf("output is %v, input %v", rd.format, res.Format)
		}
		n := 0
		for {
			_, _, _, err := rd.read()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("output record %d: %v", n+1, err)
			}
			n++
		}
		if n != res.Written {
			t.Fatalf("output has %d records, Process reports %d written", n, res.Written)
		}
	})
}
