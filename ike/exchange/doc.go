// Package exchange runs IKEv2 exchanges (RFC 7296): for now the initiator
// of IKE_SA_INIT and IKE_AUTH with a pre-shared key, with NAT detection
// (§2.23) and the float to UDP/4500 (RFC 3948), which yields an
// established IKE SA and its first CHILD_SA.
//
// The state machine (Initiator) is transport-free: it turns received
// datagrams into the next request. Dial drives it over UDP sockets with
// retransmission (§2.1). ChildSA.Config turns a negotiated CHILD_SA into
// the setkey.Config that installs it in an ipsec.Engine.
package exchange
