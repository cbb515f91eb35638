// Package espcap is Keel's offline ESP tool: it reads a pcap file, runs
// every packet through an ipsec.Engine configured from a setkey(8) file
// (SPD and SAD), and writes the encrypted or decrypted packets to another
// pcap file, reporting per-SA counters and drop reasons. keelctl mounts
// NewCommand as "keelctl esp"; the interop tests use Process.
package espcap

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
	"github.com/keelinit/keel/ipsec"
	"github.com/keelinit/keel/ipsec/setkey"
)

// Direction selects what Process does to each packet.
type Direction uint8

// Directions.
const (
	// Encrypt runs packets through the outbound path: packets matching
	// an ipsec policy come out as ESP, "none" policies pass unchanged.
	Encrypt Direction = iota
	// Decrypt runs packets through the inbound path: ESP and ESP-in-UDP
	// packets are verified and decapsulated, others pass when policy
	// allows.
	Decrypt
)

// String returns "encrypt" or "decrypt".
func (d Direction) String() string {
	if d == Decrypt {
		return "decrypt"
	}
	return "encrypt"
}

// Result summarises one Process run.
type Result struct {
	Direction Direction
	// Read counts capture records; NonIP those whose link-layer payload
	// is not IPv4/IPv6 (copied unchanged).
	Read, NonIP int
	// Forwarded, Bypassed and Local count engine verdicts (Local: NAT-T
	// IKE datagrams, copied unchanged); Dropped counts packets not
	// written.
	Forwarded, Bypassed, Local, Dropped int
	// Written counts output records.
	Written int
	// SAs and Counters are the engine status after the run (no keys).
	SAs      []ipsec.SAStatus
	Counters ipsec.Counters
}

// batchSize is how many packets go to the engine at once.
const batchSize = 64

// ErrLinkType reports a capture link type the tool cannot handle.
var ErrLinkType = errors.New("espcap: unsupported link type")

// linkInfo locates the IP packet inside a capture record.
type linkInfo struct {
	// ipOffset returns the offset of the IP header in a record, or -1 if
	// the record carries no IPv4/IPv6 packet.
	ipOffset func(b []byte) int
	// setFamily rewrites the record's link header for an IP packet of the
	// given family (for encapsulation that changes it).
	setFamily func(hdr []byte, v6 bool)
}

func linkFor(lt layers.LinkType) (linkInfo, error) {
	switch lt {
	case layers.LinkTypeEthernet:
		return linkInfo{
			ipOffset: func(b []byte) int {
				off := 12
				for {
					if len(b) < off+2 {
						return -1
					}
					switch binary.BigEndian.Uint16(b[off:]) {
					case 0x8100, 0x88a8: // VLAN tags
						off += 4
						continue
					case 0x0800, 0x86dd:
						return off + 2
					}
					return -1
				}
			},
			setFamily: func(hdr []byte, v6 bool) {
				et := uint16(0x0800)
				if v6 {
					et = 0x86dd
				}
				binary.BigEndian.PutUint16(hdr[len(hdr)-2:], et)
			},
		}, nil
	case layers.LinkTypeRaw, layers.LinkTypeIPv4, layers.LinkTypeIPv6, 12 /* DLT_RAW on some systems */ :
		return linkInfo{
			ipOffset:  func(b []byte) int { return ipOnly(b, 0) },
			setFamily: func([]byte, bool) {},
		}, nil
	case layers.LinkTypeLinuxSLL:
		return linkInfo{
			ipOffset: func(b []byte) int {
				if len(b) < 16 {
					return -1
				}
				switch binary.BigEndian.Uint16(b[14:]) {
				case 0x0800, 0x86dd:
					return 16
				}
				return -1
			},
			setFamily: func(hdr []byte, v6 bool) {
				et := uint16(0x0800)
				if v6 {
					et = 0x86dd
				}
				binary.BigEndian.PutUint16(hdr[14:], et)
			},
		}, nil
	case layers.LinkTypeNull, layers.LinkTypeLoop:
		return linkInfo{
			ipOffset:  func(b []byte) int { return ipOnly(b, 4) },
			setFamily: func([]byte, bool) {},
		}, nil
	}
	return linkInfo{}, fmt.Errorf("%w: %v", ErrLinkType, lt)
}

func ipOnly(b []byte, off int) int {
	if len(b) > off && (b[off]>>4 == 4 || b[off]>>4 == 6) {
		return off
	}
	return -1
}

type record struct {
	ci    gopacket.CaptureInfo
	data  []byte
	ipOff int
	pkt   *ipsec.Packet
}

// Process reads a pcap stream from r, runs it through e in direction d and
// writes the result, with the input's link type, to w. Records are kept in
// order; dropped packets are not written. It returns the summary, with e's
// status after the run.
func Process(e *ipsec.Engine, d Direction, r io.Reader, w io.Writer) (*Result, error) {
	rd, err := pcapgo.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("reading pcap header: %w", err)
	}
	lt := rd.LinkType()
	li, err := linkFor(lt)
	if err != nil {
		return nil, err
	}
	wr := pcapgo.NewWriterNanos(w)
	if err := wr.WriteFileHeader(262144, lt); err != nil {
		return nil, err
	}
	pool := ipsec.NewPool(65535)
	res := &Result{Direction: d}
	var recs []*record
	var pkts []*ipsec.Packet
	flush := func() error {
		if len(pkts) > 0 {
			if d == Encrypt {
				e.Outbound(pkts)
			} else {
				e.Inbound(pkts)
			}
		}
		for _, rc := range recs {
			out := rc.data
			if p := rc.pkt; p != nil {
				switch p.Verdict {
				case ipsec.VerdictForward:
					res.Forwarded++
					hdr := append([]byte(nil), rc.data[:rc.ipOff]...)
					if len(hdr) > 0 {
						li.setFamily(hdr, p.Data()[0]>>4 == 6)
					}
					out = append(hdr, p.Data()...)
				case ipsec.VerdictBypass:
					res.Bypassed++
				case ipsec.VerdictLocal:
					res.Local++
				default:
					res.Dropped++
					out = nil
				}
				p.Release()
			}
			if out != nil {
				ci := rc.ci
				ci.CaptureLength, ci.Length = len(out), len(out)
				if err := wr.WritePacket(ci, out); err != nil {
					return err
				}
				res.Written++
			}
		}
		recs, pkts = recs[:0], pkts[:0]
		return nil
	}
	for {
		data, ci, err := rd.ReadPacketData()
		if err == io.EOF {
			break
		}
		if err != nil {
			return res, fmt.Errorf("reading record %d: %w", res.Read+1, err)
		}
		res.Read++
		rc := &record{ci: ci, data: data, ipOff: li.ipOffset(data)}
		if rc.ipOff < 0 {
			res.NonIP++
		} else {
			p := pool.Get()
			if !p.SetData(data[rc.ipOff:]) {
				p.Release()
				res.Dropped++
				continue
			}
			p.Frame = ipsec.FrameIP
			rc.pkt = p
			pkts = append(pkts, p)
		}
		recs = append(recs, rc)
		if len(recs) >= batchSize {
			if err := flush(); err != nil {
				return res, err
			}
		}
	}
	if err := flush(); err != nil {
		return res, err
	}
	res.SAs = e.SAs()
	res.Counters = e.Counters()
	return res, nil
}

// Options configure Run.
type Options struct {
	Direction Direction
	// Config is the setkey file; In and Out the pcap files.
	Config, In, Out string
	// Framework binds the SAs; nil creates one with the aesni provider
	// (the Go standard library's AES-NI/ARMv8 code) registered.
	Framework *crypto.Framework
}

// Run applies the setkey file to a fresh engine and processes In into Out.
// Errors name the file they concern.
func Run(ctx context.Context, o Options) (*Result, error) {
	cfg, err := setkey.ParseFile(o.Config)
	if err != nil {
		return nil, err
	}
	fw := o.Framework
	if fw == nil {
		fw = crypto.New(crypto.Options{})
		defer fw.Close(ctx)
		if err := fw.Register(ctx, aesni.New()); err != nil {
			cfg.Zero()
			return nil, fmt.Errorf("registering aesni: %w", err)
		}
	}
	e := ipsec.NewEngine(fw, ipsec.Options{})
	defer e.Close(ctx)
	if err := e.Apply(ctx, cfg); err != nil {
		return nil, err
	}
	in, err := os.Open(o.In)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	out, err := os.Create(o.Out)
	if err != nil {
		return nil, err
	}
	res, err := Process(e, o.Direction, in, out)
	if cerr := out.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return res, fmt.Errorf("%s: %w", o.In, err)
	}
	return res, nil
}

// WriteReport prints res: totals, then one line per SA with its provider,
// counters and drop reasons, then the engine-wide drop reasons.
func WriteReport(w io.Writer, res *Result) {
	fmt.Fprintf(w, "%s: read %d, written %d (forwarded %d, bypassed %d, ike %d, non-ip %d), dropped %d\n",
		res.Direction, res.Read, res.Written, res.Forwarded, res.Bypassed, res.Local, res.NonIP, res.Dropped)
	for _, s := range res.SAs {
		fmt.Fprintf(w, "  sa %v %v->%v spi 0x%08x %v %v provider=%s rebinds=%d state=%s out=%d/%dB in=%d/%dB seq=%d replay-top=%d%s\n",
			s.Proto, s.Src, s.Dst, s.SPI, s.Mode, s.Alg, s.Provider, s.Rebinds, s.State,
			s.OutPackets, s.OutBytes, s.InPackets, s.InBytes, s.Seq, s.ReplayTop, dropString(s.Drops))
	}
	fmt.Fprintf(w, "  engine%s\n", dropString(res.Counters.Drops))
}

func dropString(d ipsec.Drops) string {
	if len(d) == 0 {
		return " drops: none"
	}
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(" drops:")
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%d", k, d[k])
	}
	return b.String()
}
