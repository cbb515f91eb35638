package wire

import (
	"encoding/binary"
	"fmt"
)

// HeaderLen is the length of the IKE header (§3.1).
const HeaderLen = 28

// MaxMessageLen bounds what Decode accepts: the largest UDP payload.
const MaxMessageLen = 65535 - 8

// SPI is an IKE SA Security Parameter Index, eight octets.
type SPI [8]byte

// String returns the SPI in hex, as strongSwan prints it.
func (s SPI) String() string { return fmt.Sprintf("%016x", binary.BigEndian.Uint64(s[:])) }

// IsZero reports whether s is all zeros (the responder SPI of an initial request).
func (s SPI) IsZero() bool { return s == SPI{} }

// Header is the IKE header. Next Payload and Length are computed by Encode
// and checked by Decode, so they are not fields.
type Header struct {
	SPIi, SPIr SPI
	// Version is the major (high nibble) and minor (low nibble) version: 0x20.
	Version   uint8
	Exchange  ExchangeType
	Flags     uint8
	MessageID uint32
}

// Initiator reports whether the I flag is set (sent by the original initiator).
func (h *Header) Initiator() bool { return h.Flags&FlagInitiator != 0 }

// Response reports whether the R flag is set.
func (h *Header) Response() bool { return h.Flags&FlagResponse != 0 }

// Version20 is IKEv2.0.
const Version20 uint8 = 0x20

func (h *Header) put(b []byte, next PayloadType, length int) {
	copy(b[0:8], h.SPIi[:])
	copy(b[8:16], h.SPIr[:])
	b[16] = uint8(next)
	b[17] = h.Version
	b[18] = uint8(h.Exchange)
	b[19] = h.Flags
	binary.BigEndian.PutUint32(b[20:24], h.MessageID)
	binary.BigEndian.PutUint32(b[24:28], uint32(length))
}

// DecodeHeader parses the IKE header of b and returns it with the first
// payload's type and the message length it declares. It checks the major
// version (INVALID_MAJOR_VERSION), and that the declared length is at least
// HeaderLen and equals len(b): one IKE message per datagram.
func DecodeHeader(b []byte) (Header, PayloadType, error) {
	var h Header
	if len(b) < HeaderLen {
		return h, 0, syntaxErr(0, PayloadNone, "%d bytes, shorter than the %d-byte header", len(b), HeaderLen)
	}
	copy(h.SPIi[:], b[0:8])
	copy(h.SPIr[:], b[8:16])
	next := PayloadType(b[16])
	h.Version = b[17]
	h.Exchange = ExchangeType(b[18])
	h.Flags = b[19]
	h.MessageID = binary.BigEndian.Uint32(b[20:24])
	if h.Version>>4 != 2 {
		return h, next, &Error{Offset: 17, Notify: INVALID_MAJOR_VERSION, Reason: fmt.Sprintf("major version %d, want 2", h.Version>>4)}
	}
	n := binary.BigEndian.Uint32(b[24:28])
	if n != uint32(len(b)) {
		return h, next, syntaxErr(24, PayloadNone, "length field %d, datagram holds %d bytes", n, len(b))
	}
	return h, next, nil
}
