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
// Packet buffers come from a Pool with headroom and tailroom so that ESP is
// added and removed in place; in steady state the data path allocates
// nothing per packet.
package ipsec
