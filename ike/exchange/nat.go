package exchange

import (
	"crypto/sha1"
	"encoding/binary"
	"net/netip"

	"github.com/keelinit/keel/ike/wire"
)

// NATHash is the NAT_DETECTION_*_IP data of §2.23:
// SHA-1(SPIi | SPIr | IP address | port). The responder SPI is zero in an
// IKE_SA_INIT request.
func NATHash(spii, spir wire.SPI, ap netip.AddrPort) []byte {
	h := sha1.New()
	h.Write(spii[:])
	h.Write(spir[:])
	h.Write(ap.Addr().Unmap().AsSlice())
	h.Write(binary.BigEndian.AppendUint16(nil, ap.Port()))
	return h.Sum(nil)
}
