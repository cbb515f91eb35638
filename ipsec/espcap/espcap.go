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
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/renameio/v2"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

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
	// Format is the input's format, which the output keeps.
	Format Format
	// Read counts capture records; NonIP those whose link-layer payload
	// is not IPv4/IPv6 (copied unchanged).
	Read, NonIP int
	// Forwarded, Bypassed and Local count engine verdicts (Local: NAT-T
	// IKE datagrams, copied unchanged); Dropped counts packets not
	// written.
	Forwarded, Bypassed, Local, Dropped int
	// Written counts output records.
	Written int
	// Drops counts the packets of this run that were not written, by
	// reason (ipsec.DropReason names); they add up to Dropped.
	Drops map[string]int
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
	link  linkInfo
	ipOff int
	pkt   *ipsec.Packet
}

// TruncatedError reports a capture whose records stop being readable
// (cut short, or damaged) after Records good ones; Process still
// processed and wrote every record it read.
type TruncatedError struct {
	Records int
	Err     error
}

// Error renders e.g. "capture truncated after 6 records: unexpected EOF".
func (e *TruncatedError) Error() string {
	return fmt.Sprintf("capture truncated after %d records: %v", e.Records, e.Err)
}

// Unwrap returns the read error.
func (e *TruncatedError) Unwrap() error { return e.Err }

// Process reads a pcap or pcapng stream from r (told apart by their
// magic), runs it through e in direction d and writes the result to w in
// the input's format, with the input's link types (and, for pcapng, its
// interfaces). Records are kept in order; dropped packets are not
// written. It returns the summary, with e's status after the run.
//
// A record that cannot be read (a truncated or damaged capture) ends the
// run: every record read before it is processed and written, and the
// error is a *TruncatedError with the summary. Other errors (header,
// link type, write) return at once; the output is then incomplete.
func Process(e *ipsec.Engine, d Direction, r io.Reader, w io.Writer) (*Result, error) {
	rd, err := newCaptureReader(r)
	if err != nil {
		return nil, err
	}
	links := map[layers.LinkType]linkInfo{}
	link := func(lt layers.LinkType) (linkInfo, error) {
		if li, ok := links[lt]; ok {
			return li, nil
		}
		li, err := linkFor(lt)
		if err != nil {
			return li, err
		}
		links[lt] = li
		return li, nil
	}
	if rd.pcap != nil {
		if _, err := link(rd.pcap.LinkType()); err != nil {
			return nil, err
		}
	} else if _, err := link(rd.ng.LinkType()); err != nil {
		return nil, err
	}
	wr, err := newCaptureWriter(w, rd)
	if err != nil {
		return nil, err
	}
	pool := ipsec.NewPool(65535)
	res := &Result{Direction: d, Format: rd.format, Drops: map[string]int{}}
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
						rc.link.setFamily(hdr, p.Data()[0]>>4 == 6)
					}
					out = append(hdr, p.Data()...)
				case ipsec.VerdictBypass:
					res.Bypassed++
				case ipsec.VerdictLocal:
					res.Local++
				default:
					res.Dropped++
					res.Drops[p.Drop.String()]++
					out = nil
				}
				p.Release()
			}
			if out != nil {
				ci := rc.ci
				ci.CaptureLength, ci.Length = len(out), len(out)
				if err := wr.write(ci, out); err != nil {
					return err
				}
				res.Written++
			}
		}
		recs, pkts = recs[:0], pkts[:0]
		return nil
	}
	var readErr error
	for {
		data, ci, lt, err := rd.read()
		if err == io.EOF {
			break
		}
		if err != nil {
			readErr = &TruncatedError{Records: res.Read, Err: err}
			break
		}
		li, err := link(lt)
		if err != nil {
			return res, fmt.Errorf("record %d: %w", res.Read+1, err)
		}
		res.Read++
		rc := &record{ci: ci, data: data, link: li, ipOff: li.ipOffset(data)}
		if rc.ipOff < 0 {
			res.NonIP++
		} else {
			p := pool.Get()
			if !p.SetData(data[rc.ipOff:]) {
				p.Release()
				res.Dropped++
				res.Drops[ipsec.DropNoRoom.String()]++
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
	if err := wr.flush(); err != nil {
		return res, err
	}
	res.SAs = e.SAs()
	res.Counters = e.Counters()
	return res, readErr
}

// Options configure Run.
type Options struct {
	Direction Direction
	// Config is the setkey file; In and Out the capture files (pcap or
	// pcapng in; the output keeps the input's format).
	Config, In, Out string
	// Framework binds the SAs; nil creates one with the aesni provider
	// (the Go standard library's AES-NI/ARMv8 code) registered, logging
	// to Logger.
	Framework *crypto.Framework
	// Logger receives the framework's log when Run creates it; nil
	// discards it (keelctl esp -v logs to stderr).
	Logger *slog.Logger
	// AllowDrops accepts packets dropped as errors (bad ICV, replay,
	// policy...): without it Run returns a *DropsError after writing Out.
	AllowDrops bool
	// Progress, if not nil, receives a progress bar (redrawn in place with
	// carriage returns, cleared at the end) while In is read, starting
	// once the run has taken ProgressDelay.
	Progress      io.Writer
	ProgressDelay time.Duration
}

// DropsError reports packets dropped for reasons that are errors (a
// wrong key, a replayed or forged packet, no matching policy...).
type DropsError struct {
	// Drops are the error drops by reason; Total their sum.
	Drops map[string]int
	Total int
}

// Error renders e.g. "8 packets dropped (bad-icv=8)".
func (e *DropsError) Error() string {
	keys := slices.Sorted(maps.Keys(e.Drops))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, e.Drops[k])
	}
	return fmt.Sprintf("%d packets dropped (%s)", e.Total, strings.Join(parts, " "))
}

// benignDrops are drop reasons that are not errors: NAT-T keepalives and
// dummy packets are meant to be discarded.
var benignDrops = map[string]bool{ipsec.DropKeepalive.String(): true, ipsec.DropDummy.String(): true}

// ErrorDrops returns res's drops that are errors (every reason but NAT-T
// keepalives and dummy packets), or nil if there are none.
func (res *Result) ErrorDrops() *DropsError {
	e := &DropsError{Drops: map[string]int{}}
	for k, n := range res.Drops {
		if !benignDrops[k] && n > 0 {
			e.Drops[k] = n
			e.Total += n
		}
	}
	if e.Total == 0 {
		return nil
	}
	return e
}

// Run applies the setkey file to a fresh engine and processes In into Out.
// Out is written atomically: to a temporary file in its directory,
// renamed over Out only once the run succeeded or the input turned out
// truncated (then Out holds every packet read, and the error is a
// *TruncatedError). On any other error Out is left as it was. After a
// complete run, error drops fail it with a *DropsError unless
// AllowDrops. Errors name the file they concern.
func Run(ctx context.Context, o Options) (*Result, error) {
	cfg, err := setkey.ParseFile(o.Config)
	if err != nil {
		return nil, err
	}
	fw := o.Framework
	if fw == nil {
		log := o.Logger
		if log == nil {
			log = slog.New(slog.DiscardHandler)
		}
		fw = crypto.New(crypto.Options{Logger: log})
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
	var src io.Reader = in
	if o.Progress != nil {
		st, err := in.Stat()
		if err != nil {
			return nil, err
		}
		bar := startProgress(o.Progress, st.Size(), o.ProgressDelay)
		defer bar.stop()
		src = bar.reader(in)
	}
	out, err := renameio.NewPendingFile(o.Out, renameio.WithTempDir(filepath.Dir(o.Out)),
		renameio.WithPermissions(0o666), renameio.WithExistingPermissions())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.Out, err)
	}
	defer out.Cleanup() // removes the temporary file unless it replaced Out
	res, err := Process(e, o.Direction, src, out)
	var trunc *TruncatedError
	if err != nil && !errors.As(err, &trunc) {
		return res, fmt.Errorf("%s: %w", o.In, err)
	}
	if cerr := out.CloseAtomicallyReplace(); cerr != nil {
		return res, fmt.Errorf("%s: %w", o.Out, cerr)
	}
	if err != nil {
		return res, fmt.Errorf("%s: %w (%d written to %s)", o.In, err, res.Written, o.Out)
	}
	if de := res.ErrorDrops(); de != nil && !o.AllowDrops {
		return res, de
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
