package espcap

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Format is a capture file format.
type Format uint8

// Formats. Process writes its output in the format of its input.
const (
	// FormatPcap is the classic libpcap format (any of its four magics:
	// either byte order, micro- or nanosecond timestamps).
	FormatPcap Format = iota + 1
	// FormatPcapng is pcapng, Wireshark's default.
	FormatPcapng
)

// String returns "pcap" or "pcapng".
func (f Format) String() string {
	if f == FormatPcapng {
		return "pcapng"
	}
	return "pcap"
}

// ErrFormat reports input that is neither pcap nor pcapng.
var ErrFormat = errors.New("espcap: not a pcap or pcapng file")

// pcapngMagic is the block type of a pcapng Section Header Block, the
// first four bytes of every pcapng file (a palindrome: either byte order).
const pcapngMagic = 0x0a0d0d0a

// DetectFormat returns the format of a capture whose first bytes are
// head (at least 4 are needed).
func DetectFormat(head []byte) (Format, error) {
	if len(head) < 4 {
		return 0, fmt.Errorf("%w: %d bytes", ErrFormat, len(head))
	}
	switch m := binary.LittleEndian.Uint32(head); m {
	case pcapngMagic:
		return FormatPcapng, nil
	case 0xa1b2c3d4, 0xd4c3b2a1, 0xa1b23c4d, 0x4d3cb2a1:
		return FormatPcap, nil
	default:
		return 0, fmt.Errorf("%w: magic 0x%08x", ErrFormat, m)
	}
}

// captureReader reads the records of a pcap or pcapng stream and knows
// each record's link type (pcapng records belong to an interface, each
// with its own).
type captureReader struct {
	format Format
	pcap   *pcapgo.Reader
	ng     *pcapgo.NgReader
	// section counts the pcapng sections that ended: interface indexes
	// restart in each section.
	section int
}

// newCaptureReader detects the format of r by its magic and reads the
// file header.
func newCaptureReader(r io.Reader) (*captureReader, error) {
	br := bufio.NewReader(r)
	head, err := br.Peek(4)
	if err != nil && len(head) < 4 {
		if err == io.EOF {
			err = fmt.Errorf("%w: empty or shorter than a file header", ErrFormat)
		}
		return nil, fmt.Errorf("reading capture header: %w", err)
	}
	f, err := DetectFormat(head)
	if err != nil {
		return nil, fmt.Errorf("reading capture header: %w", err)
	}
	c := &captureReader{format: f}
	if f == FormatPcapng {
		// Every interface's records, whatever its link type (by default
		// gopacket, like libpcap, skips those unlike the first's).
		opts := pcapgo.NgReaderOptions{WantMixedLinkType: true,
			SectionEndCallback: func([]pcapgo.NgInterface, pcapgo.NgSectionInfo) { c.section++ }}
		c.ng, err = pcapgo.NewNgReader(br, opts)
	} else {
		c.pcap, err = pcapgo.NewReader(br)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s header: %w", f, err)
	}
	return c, nil
}

// read returns the next record and its link type; io.EOF at a clean end.
func (c *captureReader) read() ([]byte, gopacket.CaptureInfo, layers.LinkType, error) {
	if c.pcap != nil {
		d, ci, err := c.pcap.ReadPacketData()
		return d, ci, c.pcap.LinkType(), err
	}
	d, ci, err := c.ng.ReadPacketData()
	if err != nil {
		return nil, ci, 0, err
	}
	intf, err := c.ng.Interface(ci.InterfaceIndex)
	if err != nil {
		return nil, ci, 0, fmt.Errorf("record names interface %d: %w", ci.InterfaceIndex, err)
	}
	return d, ci, intf.LinkType, nil
}

// interfaces returns the interfaces of the current pcapng section read
// so far (nil for pcap).
func (c *captureReader) interfaces() []pcapgo.NgInterface {
	if c.ng == nil {
		return nil
	}
	out := make([]pcapgo.NgInterface, 0, c.ng.NInterfaces())
	for i := range c.ng.NInterfaces() {
		intf, err := c.ng.Interface(i)
		if err != nil {
			break
		}
		out = append(out, intf)
	}
	return out
}

// captureWriter writes records in the input's format: one link type for
// pcap; for pcapng, the input's interfaces, declared as records first
// refer to them, so that interface indexes are kept.
type captureWriter struct {
	pcap     *pcapgo.Writer
	pcapLink layers.LinkType
	ng       *pcapgo.NgWriter
	// ngIDs maps an input (section, interface index) to the output's
	// interface index: the output has one section.
	ngIDs map[[2]int]int
	w     io.Writer
	in    *captureReader
}

// newCaptureWriter writes the file header of in's format to w (for
// pcapng, once the first record's interface is known).
func newCaptureWriter(w io.Writer, in *captureReader) (*captureWriter, error) {
	c := &captureWriter{w: w, in: in, ngIDs: map[[2]int]int{}}
	if in.format == FormatPcap {
		c.pcapLink = in.pcap.LinkType()
		c.pcap = pcapgo.NewWriterNanos(w)
		if err := c.pcap.WriteFileHeader(262144, c.pcapLink); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// ngInterface is intf as the output declares it: timestamps in
// nanoseconds (the NgWriter's fixed resolution), statistics not copied.
func ngInterface(intf pcapgo.NgInterface) pcapgo.NgInterface {
	return pcapgo.NgInterface{Name: intf.Name, Comment: intf.Comment, Description: intf.Description,
		Filter: intf.Filter, OS: intf.OS, LinkType: intf.LinkType, SnapLength: intf.SnapLength,
		TimestampResolution: 9}
}

// write writes one record.
func (c *captureWriter) write(ci gopacket.CaptureInfo, data []byte) error {
	if c.pcap != nil {
		return c.pcap.WritePacket(ci, data)
	}
	key := [2]int{c.in.section, ci.InterfaceIndex}
	id, ok := c.ngIDs[key]
	if !ok {
		intfs := c.in.interfaces()
		if ci.InterfaceIndex >= len(intfs) {
			return fmt.Errorf("record names interface %d of %d", ci.InterfaceIndex, len(intfs))
		}
		var err error
		if id, err = c.addInterface(intfs[ci.InterfaceIndex]); err != nil {
			return err
		}
		c.ngIDs[key] = id
	}
	ci.InterfaceIndex = id
	return c.ng.WritePacket(ci, data)
}

// addInterface declares intf in the output (starting it with its section
// header for the first one) and returns its index there.
func (c *captureWriter) addInterface(intf pcapgo.NgInterface) (int, error) {
	if c.ng == nil {
		opts := pcapgo.DefaultNgWriterOptions
		opts.SectionInfo.Application = "keelctl esp"
		ng, err := pcapgo.NewNgWriterInterface(c.w, ngInterface(intf), opts)
		if err != nil {
			return 0, err
		}
		c.ng = ng
		return 0, nil
	}
	return c.ng.AddInterface(ngInterface(intf))
}

// flush writes out what is buffered. A pcapng output without any record
// still gets a section header and the input's first interface.
func (c *captureWriter) flush() error {
	if c.pcap != nil {
		return nil
	}
	if c.ng == nil {
		intf := pcapgo.DefaultNgInterface
		if intfs := c.in.interfaces(); len(intfs) > 0 {
			intf = intfs[0]
		}
		if _, err := c.addInterface(intf); err != nil {
			return err
		}
	}
	return c.ng.Flush()
}
