package espcap

import (
	"bytes"
	"context"
	"io/fs"
	"net/netip"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/keelinit/keel/etc"
	"github.com/keelinit/keel/ipsec"
	"github.com/keelinit/keel/ipsec/setkey"
)

// TestShippedConfigAlternatingPolicies is issue 13's report as a user
// met it: a capture whose packets alternate 10.2.0.0/24 and 10.3.0.0/24
// destinations, encrypted with the shipped etc/ipsec.conf (unique:1 and
// unique:2 to one peer), goes out on SPI 0x1001 and 0x1002 in turn, and
// the peer (the same file with the policy directions swapped) decrypts
// every packet, none dropped as policy-mismatch. Before the fix every
// packet left on 0x1001 and the peer dropped half.
func TestShippedConfigAlternatingPolicies(t *testing.T) {
	conf, err := fs.ReadFile(etc.Root(), "etc/ipsec.conf")
	if err != nil {
		t.Fatal(err)
	}
	peerConf := strings.NewReplacer("-P out", "-P in", "-P in", "-P out").Replace(string(conf))
	engine := func(text string) *ipsec.Engine {
		cfg, err := setkey.Parse("ipsec.conf", strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		e := ipsec.NewEngine(testFramework(t), ipsec.Options{})
		t.Cleanup(func() { _ = e.Close(context.Background()) })
		if err := e.Apply(context.Background(), cfg); err != nil {
			t.Fatal(err)
		}
		return e
	}
	const n = 200 // several batches of batchSize
	var recs [][]byte
	for i := range n {
		dst := netip.AddrFrom4([4]byte{10, byte(2 + i%2), 0, byte(1 + i%7)})
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: hostA.AsSlice(), DstIP: dst.AsSlice()}
		u := &layers.UDP{SrcPort: 5000, DstPort: 6000}
		_ = u.SetNetworkLayerForChecksum(ip)
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
			ip, u, gopacket.Payload(bytes.Repeat([]byte{byte(i)}, 40+i%50))); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, buf.Bytes())
	}
	var enc bytes.Buffer
	res, err := Process(engine(string(conf)), Encrypt, bytes.NewReader(pcapOf(t, layers.LinkTypeRaw, recs...)), &enc)
	if err != nil || res.Forwarded != n {
		t.Fatalf("encrypt: %+v %v", res, err)
	}
	r, err := pcapgo.NewReader(bytes.NewReader(enc.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		data, _, err := r.ReadPacketData()
		if err != nil {
			if i != n {
				t.Fatalf("%d ESP records, want %d", i, n)
			}
			break
		}
		want := []uint32{0x1001, 0x1002}[i%2]
		if spi := uint32(data[20])<<24 | uint32(data[21])<<16 | uint32(data[22])<<8 | uint32(data[23]); data[9] != 50 || spi != want {
			t.Errorf("record %d: protocol %d SPI %#x, want ESP SPI %#x", i, data[9], spi, want)
		}
	}
	var dec bytes.Buffer
	res, err = Process(engine(peerConf), Decrypt, bytes.NewReader(enc.Bytes()), &dec)
	if err != nil || res.Forwarded != n || res.Dropped != 0 || res.Counters.Drops[ipsec.DropPolicy.String()] != 0 {
		t.Fatalf("decrypt at the peer: %+v %v", res, err)
	}
}
