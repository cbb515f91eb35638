// Package keys holds the IKEv2 cryptography of RFC 7296: the PRFs
// (HMAC-SHA2-256/384/512, RFC 4868), prf+ (§2.13), SKEYSEED and the SK_*
// keys (§2.14), CHILD_SA KEYMAT (§2.17), the Diffie-Hellman groups 14
// (MODP-2048, RFC 3526), 19 (ECP-256, RFC 5903) and 31 (Curve25519,
// RFC 8031), and the protection of the SK payload (§3.14) with AES-GCM-16
// (RFC 5282), ChaCha20-Poly1305 (RFC 7634) and AES-CBC with HMAC-SHA2.
//
// Every type holding a secret has a Zero method that overwrites it and a
// String method that prints lengths, never bytes; fmt's %v, %+v and %#v
// of such a value go through String or GoString.
package keys
