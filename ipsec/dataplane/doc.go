// Package dataplane moves packets between a TUN device and the outer ESP
// socket through Keel's IPsec engine: it makes Keel a userspace IPsec
// gateway, as strongSwan's kernel-libipsec and wireguard-go are.
//
// Outbound, one goroutine reads a batch from the TUN (TSO super-segments come
// split into MTU-sized packets), hands the whole batch to Engine.Outbound
// (SPD lookup, then one crypto batch per SA through its Binding) and sends
// the ESP packets with one Send (sendmmsg, coalesced with UDP GSO). Inbound,
// one goroutine per socket (IPv4, IPv6) receives a batch (recvmmsg with UDP
// GRO), hands it to Engine.Inbound and writes the inner packets to the TUN
// in one Write (GRO-coalesced into large segments). Buffers are ipsec pool
// packets owned by their loop for the gateway's lifetime and recycled in
// place every batch: there are no per-packet channel sends, the dataplane and
// engine allocate nothing per packet (TestHotPathNoAllocs), and ESP is added
// and removed in place. The one per-datagram allocation left is inside
// wireguard-go's StdNetBind receive path (an endpoint per datagram, a TODO
// there). Each loop holds BatchSize packets of 64 KiB (GSO/GRO need room to
// coalesce), about 25 MiB per gateway.
//
// A gateway serves every peer its engine's SAs name (Config.Peer is only
// informational): each ESP packet goes to the remote endpoint of the SA
// its policy selected, and inbound ESP from any peer is matched to its SA
// by SPI. Traffic is counted per interface and per peer (Status.Peers; call
// Refresh after the engine's SAs change).
//
// Outbound packets with no policy or a discard policy, and inbound packets
// that fail any check, are dropped by the engine and counted here per
// interface and reason, together with the gateway's own drop reasons (see
// Status).
//
// keeld hosts a gateway with Start; tests use New with the fakes of
// package netio/netiotest.
package dataplane
