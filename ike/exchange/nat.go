package exchange

import (
	"bytes"
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

// detectNAT reads the NAT_DETECTION_*_IP notifications of ps, whose hashes
// were made with spii and spir, and reports a NAT in front of this side
// (the peer's destination hash does not match local) and in front of the
// peer (no source hash matches remote). Without both notifications the
// peer does not support NAT traversal: no NAT is reported.
func detectNAT(ps []wire.Payload, spii, spir wire.SPI, local, remote netip.AddrPort) (natLocal, natRemote bool) {
	srcs := wire.Notifies(ps, wire.NAT_DETECTION_SOURCE_IP)
	dst := wire.Notifies(ps, wire.NAT_DETECTION_DESTINATION_IP)
	if len(srcs) == 0 || len(dst) == 0 {
		return false, false
	}
	natRemote = true
	want := NATHash(spii, spir, remote)
	for _, s := range srcs {
		if bytes.Equal(s.Data, want) {
			natRemote = false
		}
	}
	return !bytes.Equal(dst[0].Data, NATHash(spii, spir, local)), natRemote
}
