// Package ipsec is Keel's userspace ESP engine (RFC 4303): the SAD, ESP
// encapsulation and decapsulation in tunnel and transport mode over IPv4
// and IPv6, NAT-T ESP-in-UDP (RFC 3948), the RFC 6479 anti-replay window
// with extended sequence numbers, SA lifetimes, and pooled packet buffers.
//
// The Engine is configured from a setkey(8) file (package ipsec/setkey),
// applied all-or-nothing, with the policies held by package ipsec/spd.
// Every SA holds a crypto.Binding, so its crypto session moves live to a
// faster or healthier provider; SA status shows the bound provider and the
// rebind count.
//
// The data path works on batches of *Packet: Outbound takes plaintext IP
// packets (for example from a TUN device) and returns ESP packets, Inbound
// takes ESP (raw IP, ESP-in-UDP payloads or bare ESP) and returns the
// decapsulated IP packets. Both submit one crypto batch per SA run and wait
// for its completions; callers get parallelism by calling them from
// several goroutines, which share nothing but atomic SA counters and, on
// inbound, a short per-SA lock around the replay window.
//
// SA selection (RFC 4301 sections 4.4.1, 5.1, 5.2): an outbound packet
// takes the first policy, in SPD order, whose selector matches it. "none"
// passes it in the clear (VerdictBypass), "discard" drops it; an ipsec
// policy's request picks the SA as FreeBSD's key_allocsa_policy does:
// among the mature or dying SAs with the request's endpoints (the
// packet's addresses in transport mode), of its mode or mode any, and for
// unique:N of reqid N, the newest installed, or the oldest with
// Options.PreferOldSA (net.key.preferred_oldsa; rc.conf
// ipsec_preferred_oldsa). With none, "use" passes the packet in the
// clear, the other levels drop it. Inbound, the SA is found by SPI,
// destination and protocol (ESP or ESP in UDP), and the decapsulated
// packet must meet an inbound ipsec policy whose request the SA serves
// (same mode, tunnel endpoints and unique reqid), else it is dropped as
// policy-mismatch. Each call runs under one configuration (an SAD
// snapshot and the SPD generation published with it), and every cache on
// the data path (the SPD flow cache, the per-call last flow, last SA
// and last inbound SA, the per-batch flow and SA carried to the next
// call, each SA's last inbound policy decision) is keyed on the snapshot
// or generation and on every field its decision depends on. The tests
// check this against a reference model (refmodel_test.go).
//
// Packet buffers come from a Pool with headroom and tailroom so that ESP is
// added and removed in place; in steady state the data path allocates
// nothing per packet.
package ipsec
