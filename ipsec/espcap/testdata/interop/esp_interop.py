#!/usr/bin/python3
"""Scapy side of Keel's ESP interop tests (run with Debian's python3-scapy).

usage: esp_interop.py decrypt SA_JSON esp.pcap plain.pcap
         decrypt every packet of esp.pcap with scapy and compare it with the
         corresponding packet of plain.pcap (IP layer, byte for byte)
       esp_interop.py encrypt SA_JSON plain.pcap out.pcap
         encrypt every packet of plain.pcap with scapy into out.pcap

SA_JSON: {"spi": int, "crypt": scapy name, "ckey": hex, "auth": name|null,
          "akey": hex, "tunnel": bool, "udp": bool, "esn": bool,
          "src": outer src, "dst": outer dst}
Prints one line per mismatch and a summary; exits 1 on any failure.
"""
import json
import sys

from scapy.all import Ether, IP, UDP, raw, rdpcap, wrpcap
from scapy.layers.ipsec import ESP, SecurityAssociation


def make_sa(c):
    kw = dict(spi=c["spi"], crypt_algo=c["crypt"], crypt_key=bytes.fromhex(c["ckey"]))
    if c.get("auth"):
        kw.update(auth_algo=c["auth"], auth_key=bytes.fromhex(c["akey"]))
    if c["tunnel"]:
        kw["tunnel_header"] = IP(src=c["src"], dst=c["dst"])
    if c["udp"]:
        kw["nat_t_header"] = UDP(sport=4500, dport=4500)
    if c.get("esn"):
        kw.update(esn_en=True, esn=0)
    return SecurityAssociation(ESP, **kw)


def main():
    op, cfg = sys.argv[1], json.loads(sys.argv[2])
    sa = make_sa(cfg)
    if op == "decrypt":
        got, want = rdpcap(sys.argv[3]), rdpcap(sys.argv[4])
        if len(got) != len(want):
            print("count mismatch: %d esp packets, %d plaintext" % (len(got), len(want)))
            return 1
        bad = 0
        for i, (g, w) in enumerate(zip(got, want)):
            try:
                d = sa.decrypt(g[IP])
            except Exception as e:  # integrity errors and the like
                print("packet %d: %s: %s" % (i, type(e).__name__, e))
                bad += 1
                continue
            ref = raw(w[IP])[:w[IP].len]  # without Ethernet padding
            if raw(d) != ref:
                print("packet %d: plaintext mismatch\n got %s\nwant %s" % (i, raw(d).hex(), ref.hex()))
                bad += 1
        print("decrypted %d packets, %d bad" % (len(got), bad))
        return 1 if bad else 0
    if op == "encrypt":
        out = []
        for p in rdpcap(sys.argv[3]):
            ip = IP(raw(p[IP])[:p[IP].len])  # without Ethernet padding
            e = sa.encrypt(ip)
            if UDP in e:
                # scapy 2.5 leaves the NAT-T UDP length at 8 (it deletes
                # the field before the payload exists); recompute it, as a
                # real sender would.
                e[UDP].len = None
                e = IP(raw(e))
            out.append(Ether(src=p[Ether].src, dst=p[Ether].dst) / e)
        wrpcap(sys.argv[4], out)
        print("encrypted %d packets" % len(out))
        return 0
    print("unknown operation " + op)
    return 2


if __name__ == "__main__":
    sys.exit(main())
