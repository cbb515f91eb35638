// Package wire is the IKEv2 message codec of RFC 7296 §3: the IKE header,
// the generic payload chain and every payload an IKEv2 gateway exchanges
// (SA with its proposals, transforms and attributes; KE; Nonce; IDi/IDr;
// CERT and CERTREQ kept raw; AUTH; Notify; Delete; Vendor ID; TSi/TSr; and
// the Encrypted payload SK of §3.14 whose body stays opaque here; the
// ike/keys package protects and opens it).
//
// Input is untrusted. Decode checks every length against its enclosing
// structure and against the datagram, refuses an unknown payload whose
// critical bit is set (§2.5) with an *Error whose Notify is
// UNSUPPORTED_CRITICAL_PAYLOAD, skips (and keeps, as *Unknown) one whose
// bit is clear, and never panics. Decoded payloads own their bytes: none
// aliases the input buffer.
//
// Encoding is canonical: Decode(Encode(m)) equals m for every m that
// Decode returns. Known payload types are always sent with the critical
// bit clear, as §2.5 requires.
package wire
