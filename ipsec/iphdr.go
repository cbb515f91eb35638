package ipsec

import (
	"encoding/binary"
	"net/netip"

	"github.com/keelinit/keel/ipsec/spd"
)

// IP protocol numbers used here.
const (
	protoHopByHop = 0
	protoICMP     = 1
	protoIPIP     = 4
	protoTCP      = 6
	protoUDP      = 17
	protoIPv6     = 41
	protoRouting  = 43
	protoFragment = 44
	protoESP      = 50
	protoICMPv6   = 58
	protoNoNext   = 59
	protoDstOpts  = 60
	protoSCTP     = 132
)

// checksum returns the Internet checksum (RFC 1071) of b folded into sum.
func checksum(b []byte, sum uint32) uint16 {
	for len(b) >= 2 {
		sum += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// ipv4HeaderChecksum computes and stores the checksum of the IPv4 header h.
func ipv4HeaderChecksum(h []byte) {
	h[10], h[11] = 0, 0
	binary.BigEndian.PutUint16(h[10:], checksum(h, 0))
}

// ipHeader describes a validated outer or inner IP header.
type ipHeader struct {
	v6     bool
	hlen   int   // bytes up to the upper-layer header (IPv6: after extension headers)
	total  int   // packet length from the header
	proto  uint8 // upper-layer protocol
	nhOff  int   // offset of the byte that holds proto
	frag   bool  // a fragment (not reassembled here)
	src    netip.Addr
	dst    netip.Addr
	tclass uint8
}

// parseIP validates the IP header at the start of b. It returns ok=false
// for anything malformed or truncated.
func parseIP(b []byte) (h ipHeader, ok bool) {
	ok = parseIPInto(b, &h)
	return h, ok
}

// parseIPInto is parseIP writing into *h (which it overwrites entirely):
// the hot paths use it to avoid copying the header description through
// the stack, whose small field stores stall the wide loads of a struct
// copy (store-to-load forwarding).
func parseIPInto(b []byte, h *ipHeader) bool {
	*h = ipHeader{}
	if len(b) < 1 {
		return false
	}
	switch b[0] >> 4 {
	case 4:
		if len(b) < 20 {
			return false
		}
		hl := int(b[0]&0x0f) * 4
		tot := int(binary.BigEndian.Uint16(b[2:]))
		if hl < 20 || tot < hl || tot > len(b) {
			return false
		}
		h.hlen, h.total, h.proto, h.nhOff = hl, tot, b[9], 9
		h.frag = binary.BigEndian.Uint16(b[6:])&0x3fff != 0
		h.src = netip.AddrFrom4([4]byte(b[12:16]))
		h.dst = netip.AddrFrom4([4]byte(b[16:20]))
		h.tclass = b[1]
		return true
	case 6:
		if len(b) < 40 {
			return false
		}
		tot := 40 + int(binary.BigEndian.Uint16(b[4:]))
		if tot > len(b) {
			return false
		}
		h.v6, h.total = true, tot
		h.src = netip.AddrFrom16([16]byte(b[8:24]))
		h.dst = netip.AddrFrom16([16]byte(b[24:40]))
		h.tclass = b[0]<<4 | b[1]>>4
		nh, off, nhOff := b[6], 40, 6
		for {
			switch nh {
			case protoHopByHop, protoRouting, protoDstOpts:
				if off+8 > tot {
					return false
				}
				l := 8 + int(b[off+1])*8
				if off+l > tot {
					return false
				}
				nh, nhOff, off = b[off], off, off+l
				continue
			case protoFragment:
				if off+8 > tot {
					return false
				}
				h.frag = true
				nh, nhOff, off = b[off], off, off+8
				continue
			}
			break
		}
		h.hlen, h.proto, h.nhOff = off, nh, nhOff
		return true
	}
	return false
}

// flowOf returns the SPD flow of the IP packet b with header h. Ports (or
// ICMP type and code) are read when present; a non-first fragment has none.
func flowOf(b []byte, h *ipHeader) spd.Flow {
	f := spd.Flow{Src: h.src, Dst: h.dst, Proto: h.proto}
	l4 := b[h.hlen:h.total]
	if h.frag && !h.v6 && binary.BigEndian.Uint16(b[6:])&0x1fff != 0 {
		return f
	}
	switch h.proto {
	case protoTCP, protoUDP, protoSCTP:
		if len(l4) >= 4 {
			f.SrcPort = binary.BigEndian.Uint16(l4)
			f.DstPort = binary.BigEndian.Uint16(l4[2:])
		}
	case protoICMP, protoICMPv6:
		if len(l4) >= 2 {
			f.SrcPort, f.DstPort = uint16(l4[0]), uint16(l4[1])
		}
	}
	return f
}

// putIPv4 writes a 20-byte IPv4 header for a packet of total bytes.
func putIPv4(h []byte, tos uint8, total int, id uint16, proto uint8, src, dst netip.Addr) {
	h[0], h[1] = 0x45, tos
	binary.BigEndian.PutUint16(h[2:], uint16(total))
	binary.BigEndian.PutUint16(h[4:], id)
	h[6], h[7] = 0, 0
	h[8], h[9] = 64, proto
	s, d := src.As4(), dst.As4()
	copy(h[12:16], s[:])
	copy(h[16:20], d[:])
	ipv4HeaderChecksum(h[:20])
}

// putIPv6 writes a 40-byte IPv6 header with the given payload length.
func putIPv6(h []byte, tclass uint8, payload int, proto uint8, src, dst netip.Addr) {
	h[0], h[1], h[2], h[3] = 0x60|tclass>>4, tclass<<4, 0, 0
	binary.BigEndian.PutUint16(h[4:], uint16(payload))
	h[6], h[7] = proto, 64
	s, d := src.As16(), dst.As16()
	copy(h[8:24], s[:])
	copy(h[24:40], d[:])
}

// udp6Checksum computes and stores the UDP checksum of the IPv6 packet
// whose UDP header starts at u (u runs to the end of the datagram).
func udp6Checksum(src, dst netip.Addr, u []byte) {
	u[6], u[7] = 0, 0
	s, d := src.As16(), dst.As16()
	var sum uint32
	for i := 0; i < 16; i += 2 {
		sum += uint32(s[i])<<8 | uint32(s[i+1])
		sum += uint32(d[i])<<8 | uint32(d[i+1])
	}
	sum += uint32(len(u)) + protoUDP
	c := checksum(u, sum)
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(u[6:], c)
}
