package ipsec

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/keelinit/keel/crypto"
)

// DropReason says why a packet was dropped. The zero value means it was
// not dropped.
type DropReason uint8

// Drop reasons. Every packet the engine refuses is counted under exactly
// one of them, globally and, when an SA was identified, per SA.
const (
	DropNone          DropReason = iota
	DropShort                    // truncated: shorter than its headers, ESP minimum or stated length
	DropMalformed                // bad IP/UDP header (version, lengths) or an outer fragment
	DropBadLength                // ciphertext length not a multiple of the cipher block
	DropNoSA                     // inbound: unknown SPI for this destination
	DropReplay                   // inbound: sequence number outside the window or seen before
	DropAuth                     // inbound: ICV verification failed
	DropBadPad                   // inbound: padding length or contents invalid
	DropBadNextHeader            // inbound: next header does not fit the mode, or bad inner header
	DropPolicy                   // inbound: decapsulated packet does not match an inbound ipsec policy for this SA
	DropNoPolicy                 // outbound: no policy matches
	DropDiscard                  // a discard policy matched
	DropNoOutSA                  // outbound: the policy needs an SA and none is installed
	DropExpired                  // the SA passed its hard lifetime (bytes, packets or time)
	DropSeqOverflow              // outbound: the sequence number space, or the SA's reserved nonce range, is exhausted
	DropCrypto                   // the crypto provider failed the request
	DropBusy                     // the crypto binding refused the request for too long, or the SA went away
	DropNoRoom                   // the buffer lacks headroom or tailroom, or the result exceeds the MTU
	DropKeepalive                // inbound: NAT-T keepalive (RFC 3948 section 2.3); not an error
	DropDummy                    // inbound: dummy packet, next header 59 (RFC 4303 section 2.6); not an error
	DropNotESP                   // inbound: not ESP and no policy lets it bypass
	DropNoProvider               // the SA's crypto binding has no provider (its provider was unloaded by force)

	// NumDropReasons is the number of reasons, DropNone included.
	NumDropReasons
)

var dropNames = [NumDropReasons]string{
	DropNone:          "none",
	DropShort:         "short",
	DropMalformed:     "malformed",
	DropBadLength:     "bad-length",
	DropNoSA:          "no-sa",
	DropReplay:        "replay",
	DropAuth:          "bad-icv",
	DropBadPad:        "bad-pad",
	DropBadNextHeader: "bad-next-header",
	DropPolicy:        "policy-mismatch",
	DropNoPolicy:      "no-policy",
	DropDiscard:       "discard",
	DropNoOutSA:       "no-outbound-sa",
	DropExpired:       "sa-expired",
	DropSeqOverflow:   "seq-overflow",
	DropCrypto:        "crypto-error",
	DropBusy:          "crypto-busy",
	DropNoRoom:        "no-room",
	DropKeepalive:     "nat-keepalive",
	DropDummy:         "dummy",
	DropNotESP:        "not-esp",
	DropNoProvider:    "no-provider",
}

// String returns the counter name, e.g. "bad-icv".
func (d DropReason) String() string {
	if d < NumDropReasons {
		return dropNames[d]
	}
	return fmt.Sprintf("drop(%d)", uint8(d))
}

// Drops maps a drop reason name (DropReason.String) to a count; reasons
// with a zero count are omitted.
type Drops map[string]uint64

type dropCounters [NumDropReasons]atomic.Uint64

func (c *dropCounters) snapshot() Drops {
	m := Drops{}
	for i := DropReason(1); i < NumDropReasons; i++ {
		if v := c[i].Load(); v != 0 {
			m[i.String()] = v
		}
	}
	return m
}

// cryptoDrop is the drop reason of a request the crypto framework failed:
// DropNoProvider when the SA's binding has no provider, else DropCrypto.
func cryptoDrop(r *crypto.Request) DropReason {
	if errors.Is(r.Err, crypto.ErrNoProvider) {
		return DropNoProvider
	}
	return DropCrypto
}
