#!/usr/bin/env python3
"""Builds vectors.json (published known-answer vectors) and composite.json
(encrypt-then-MAC ESP vectors assembled from published pieces) for Keel's
provider self-tests.

Every published vector below is typed from its RFC/NIST document and is
re-verified here with python3-cryptography (an implementation independent of
Go's stdlib) before it is written; the script aborts on any mismatch.
Run: python3 gen_vectors.py  (writes into this directory).
"""
import hashlib, hmac, json, os, sys
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

HERE = os.path.dirname(os.path.abspath(__file__))
ESP = "/work/shared/vectors/esp/esp_vectors.json"
h = bytes.fromhex
def x(b): return b.hex()

# --- AES-CBC: NIST SP 800-38A F.2.1, F.2.3, F.2.5; RFC 3602 sec. 4 cases 1-4
P38A = h("6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e5130c81c46a35ce411e5fbc1191a0a52eff69f2445df4f9b17ad2b417be66c3710")
IV38A = h("000102030405060708090a0b0c0d0e0f")
cbc = [
 ("SP 800-38A F.2.1 CBC-AES128", "2b7e151628aed2a6abf7158809cf4f3c", IV38A, P38A,
  "7649abac8119b246cee98e9b12e9197d5086cb9b507219ee95db113a917678b273bed6b8e3c1743b7116e69e222295163ff1caa1681fac09120eca307586e1a7"),
 ("SP 800-38A F.2.3 CBC-AES192", "8e73b0f7da0e6452c810f32b809079e562f8ead2522c6b7b", IV38A, P38A,
  "4f021db243bc633d7178183a9fa071e8b4d9ada9ad7dedf4e5e738763f69145a571b242012fb7ae07fa9baac3df102e008b0e27988598881d920a9e64f5615cd"),
 ("SP 800-38A F.2.5 CBC-AES256", "603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4", IV38A, P38A,
  "f58c4c04d6e5f1ba779eabfb5f7bfbd69cfc4e967edb808d679f777bc6702c7d39f23369a9d9bacfa530e26304231461b2eb05e2c39be9fcda6c19078c6a9d1b"),
]
esp = json.load(open(ESP))
for c in esp["rfc3602_aes_cbc_raw"]:
    cbc.append(("RFC 3602 case " + str(c["case"]), c["key"], h(c["iv"]), h(c["plaintext"]), c["ciphertext"]))
aes_cbc = []
for name, key, iv, pt, ct in cbc:
    e = Cipher(algorithms.AES(h(key)), modes.CBC(iv)).encryptor()
    got = e.update(pt) + e.finalize()
    assert x(got) == ct, name
    aes_cbc.append(dict(name=name, key=key, iv=x(iv), plaintext=x(pt), ciphertext=ct))

# --- HMAC: RFC 2202 (SHA-1) and RFC 4231 (SHA-224..512; 224 not used)
aa131 = b"\xaa" * 131
t6 = b"Test Using Larger Than Block-Size Key - Hash Key First"
t7 = (b"This is a test using a larger than block-size key and a larger than block-size data. "
      b"The key needs to be hashed before being used by the HMAC algorithm.")
hm = [
 ("RFC 2202 3 test case 1", "sha1", b"\x0b" * 20, b"Hi There", "b617318655057264e28bc0b6fb378c8ef146be00"),
 ("RFC 2202 3 test case 2", "sha1", b"Jefe", b"what do ya want for nothing?", "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"),
 ("RFC 2202 3 test case 3", "sha1", b"\xaa" * 20, b"\xdd" * 50, "125d7342b9ac11cd91a39af48aa17b4f63f175d3"),
 ("RFC 2202 3 test case 5", "sha1", b"\x0c" * 20, b"Test With Truncation", "4c1a03424b55e07fe7f27be1d58bb9324a9a5a04"),
 ("RFC 2202 3 test case 6", "sha1", b"\xaa" * 80, t6, "aa4ae5e15272d00e95705637ce8a3b55ed402112"),
 ("RFC 2202 3 test case 7", "sha1", b"\xaa" * 80, b"Test Using Larger Than Block-Size Key and Larger Than One Block-Size Data", "e8e99d0f45237d786d6bbaa7965c7808bbff1a91"),
]
r4231 = [
 ("4.2 test case 1", b"\x0b" * 20, b"Hi There",
  "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
  "afd03944d84895626b0825f4ab46907f15f9dadbe4101ec682aa034c7cebc59cfaea9ea9076ede7f4af152e8b2fa9cb6",
  "87aa7cdea5ef619d4ff0b4241a1d6cb02379f4e2ce4ec2787ad0b30545e17cdedaa833b7d6b8a702038b274eaea3f4e4be9d914eeb61f1702e696c203a126854"),
 ("4.3 test case 2", b"Jefe", b"what do ya want for nothing?",
  "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
  "af45d2e376484031617f78d2b58a6b1b9c7ef464f5a01b47e42ec3736322445e8e2240ca5e69e2c78b3239ecfab21649",
  "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea2505549758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737"),
 ("4.4 test case 3", b"\xaa" * 20, b"\xdd" * 50,
  "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe",
  "88062608d3e6ad8a0aa2ace014c8a86f0aa635d947ac9febe83ef4e55966144b2a5ab39dc13814b94e3ab6e101a34f27",
  "fa73b0089d56a284efb0f0756c890be9b1b5dbdd8ee81a3655f83e33b2279d39bf3e848279a722c806b485a47e67c807b946a337bee8942674278859e13292fb"),
 ("4.5 test case 4", bytes(range(1, 26)), b"\xcd" * 50,
  "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b",
  "3e8a69b7783c25851933ab6290af6ca77a9981480850009cc5577c6e1f573b4e6801dd23c4a7d679ccf8a386c674cffb",
  "b0ba465637458c6990e5a8c5f61d4af7e576d97ff94b872de76f8050361ee3dba91ca5c11aa25eb4d679275cc5788063a5f19741120c4f2de2adebeb10a298dd"),
 ("4.7 test case 6", aa131, t6,
  "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
  "4ece084485813e9088d2c63a041bc5b44f9ef1012a2b588f3cd11f05033ac4c60c2ef6ab4030fe8296248df163f44952",
  "80b24263c7c1a3ebb71493c1dd7be8b49b46d1f41b4aeec1121b013783f8f3526b56d037e05f2598bd0fd2215d6a1e5295e64f73f63f0aec8b915a985d786598"),
 ("4.8 test case 7", aa131, t7,
  "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
  "6617178e941f020d351e2f254e8fd32c602420feb0b8fb9adccebb82461e99c5a678cc31e799176d3860e6110c46523e",
  "e37b6a775dc87dbaa4dfa9f96e5e3ffddebd71f8867289865df5a32d20cdc944b6022cac3c4982b10d5eeb55c3e4de15134676fb6de0446065c97440fa8c6a58"),
]
for name, key, data, s256, s384, s512 in r4231:
    for hn, mac in (("sha256", s256), ("sha384", s384), ("sha512", s512)):
        hm.append(("RFC 4231 " + name + " HMAC-" + hn.upper(), hn, key, data, mac))
hm.append(("RFC 4231 4.6 test case 5 HMAC-SHA256 (128-bit truncation)", "sha256", b"\x0c" * 20, b"Test With Truncation", "a3b6167473100ee06e0c796c2955552b"))
hmacs = []
for name, hn, key, data, mac in hm:
    got = hmac.new(key, data, hn).hexdigest()
    assert got.startswith(mac), (name, got)
    hmacs.append(dict(name=name, hash=hn, key=x(key), data=x(data), mac=mac))

# --- AEADs: GCM spec (McGrew-Viega) test cases 2-4 and 14-16 (96-bit IV),
# draft-mcgrew-gcm-test-01 ESP vectors, RFC 8439 2.8.2, RFC 7634 appendix A.
gP = h("d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255")
gA = h("feedfacedeadbeeffeedfacedeadbeefabaddad2")
gN = h("cafebabefacedbaddecaf888")
K3 = h("feffe9928665731c6d6a8f9467308308")
aead = [
 ("GCM spec test case 2", "aes-gcm", bytes(16), bytes(12), b"", bytes(16), "0388dace60b6a392f328c2b971b2fe78", "ab6e47d42cec13bdf53a67b21257bddf"),
 ("GCM spec test case 3", "aes-gcm", K3, gN, b"", gP,
  "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091473f5985", "4d5c2af327cd64a62cf35abd2ba6fab4"),
 ("GCM spec test case 4", "aes-gcm", K3, gN, gA, gP[:60],
  "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091", "5bc94fbc3221a5db94fae95ae7121a47"),
 ("GCM spec test case 14", "aes-gcm", bytes(32), bytes(12), b"", bytes(16), "cea7403d4d606b6e074ec5d3baf39d18", "d0d1c8a799996bf0265b98b5d48ab919"),
 ("GCM spec test case 15", "aes-gcm", K3 + K3, gN, b"", gP,
  "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662898015ad", "b094dac5d93471bdec1a502270e3cc6c"),
 ("GCM spec test case 16", "aes-gcm", K3 + K3, gN, gA, gP[:60],
  "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662", "76fc6ece0f4e1768cddf8853bb2d551b"),
 ("RFC 8439 2.8.2", "chacha20-poly1305", h("808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f"),
  h("070000004041424344454647"), h("50515253c0c1c2c3c4c5c6c7"),
  b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.",
  "d31a8d34648e60db7b86afbc53ef7ec2a4aded51296e08fea9e2b5a736ee62d63dbea45e8ca9671282fafb69da92728b1a71de0a9e060b2905d6a5b67ecd3b3692ddbd7f2d778b8c9803aee328091b58fab324e4fad675945585808b4831d7bc3ff4def08e4b7a9de576d26586cec64b6116",
  "1ae10b594f09e26a7e902ecbd0600691"),
]
for c in esp["draft_mcgrew_gcm_test_01"]:
    aead.append(("draft-mcgrew-gcm-test-01 case " + str(c["case"]), "aes-gcm", h(c["key"]), h(c["nonce"]), h(c["aad"]),
                 h(c["plaintext"]), c["ciphertext"], c["tag"]))
c = esp["rfc7634_chacha20poly1305_esp"]
c = c[0] if isinstance(c, list) else c
km = h(c["keymat"])
aead.append(("RFC 7634 appendix A", "chacha20-poly1305", km[:32], km[32:] + h(c["iv"]), h(c["aad"]), h(c["plaintext"]), c["ciphertext"], c["tag"]))
aeads = []
for name, alg, key, nonce, aad, pt, ct, tag in aead:
    a = AESGCM(key) if alg == "aes-gcm" else ChaCha20Poly1305(key)
    got = a.encrypt(nonce, pt, aad or None)
    assert x(got) == ct + tag, name
    aeads.append(dict(name=name, alg=alg, key=x(key), nonce=x(nonce), aad=x(aad), plaintext=x(pt), ciphertext=ct, tag=tag))

sources = {
 "aes_cbc": "NIST SP 800-38A appendix F.2.1/F.2.3/F.2.5; RFC 3602 section 4 cases 1-4 (via /work/shared/vectors/esp/esp_vectors.json)",
 "hmac": "RFC 2202 section 3 (HMAC-SHA-1) and RFC 4231 section 4 (HMAC-SHA-256/384/512)",
 "aead": "The Galois/Counter Mode of Operation (McGrew, Viega) appendix B test cases 2-4, 14-16; RFC 8439 section 2.8.2; draft-mcgrew-gcm-test-01 and RFC 7634 appendix A (via /work/shared/vectors/esp/esp_vectors.json)",
 "verification": "re-verified by gen_vectors.py with python3-cryptography",
}
json.dump(dict(_sources=sources, aes_cbc=aes_cbc, hmac=hmacs, aead=aeads), open(os.path.join(HERE, "vectors.json"), "w"), indent=1)

# --- composite encrypt-then-MAC ESP vectors, from the pieces above.
# Cipher part: a published AES-CBC answer (checked above). Integrity part:
# ICV = trunc(HMAC(AAD || IV || ciphertext || trailer)) with an HMAC key
# from the RFC vectors, computed here by python's hmac.
HM = {"hmac-sha1-96": ("sha1", 12, b"\xaa" * 20), "hmac-sha2-256-128": ("sha256", 16, b"Jefe".ljust(32, b"\0")),
      "hmac-sha2-384-192": ("sha384", 24, b"Jefe".ljust(48, b"\0")), "hmac-sha2-512-256": ("sha512", 32, b"Jefe".ljust(64, b"\0"))}
comp = []
def add(name, cipher_alg, keybits, auth, ckey, iv, aad, trailer, pt, ct):
    hn, n, akey = HM[auth]
    icv = hmac.new(akey, aad + iv + ct + trailer, hn).digest()[:n]
    comp.append(dict(name=name, cipher=cipher_alg, key_bits=keybits, auth=auth, cipher_key=x(ckey), auth_key=x(akey),
                     iv=x(iv), aad=x(aad), trailer=x(trailer), plaintext=x(pt), ciphertext=x(ct), icv=x(icv)))
AAD = h("0000432100000001")
for v in aes_cbc[:3]:
    for auth in HM:
        add(v["name"] + " + " + auth + " (RFC 2202/4231 key)", "aes-cbc", len(h(v["key"])) * 8, auth, h(v["key"]), h(v["iv"]), AAD, b"", h(v["plaintext"]), h(v["ciphertext"]))
add("SP 800-38A F.2.5 CBC-AES256 + hmac-sha2-256-128, ESN trailer", "aes-cbc", 256, "hmac-sha2-256-128", h(aes_cbc[2]["key"]), IV38A, AAD, h("00000001"), P38A, h(aes_cbc[2]["ciphertext"]))
for c in esp["rfc3602_esp_aes_cbc"]:
    pkt = h(c["esp_packet"]); key = h(c["key"])
    aad, iv, ct = pkt[:8], pkt[8:24], pkt[24:]
    d = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
    pt = d.update(ct) + d.finalize()
    pay = h(c["payload"])
    padlen = pt[-2]
    assert pt[:len(pay)] == pay and pt[-1] == int(c["next_header"]) and pt[len(pay):-2] == bytes(range(1, padlen + 1)), c["case"]
    for auth in ("hmac-sha1-96", "hmac-sha2-256-128"):
        add("RFC 3602 case " + str(c["case"]) + " + " + auth, "aes-cbc", 128, auth, key, iv, aad, b"", pt, ct)
for auth in HM:
    add("NULL + " + auth + " over RFC 3602 case #5 payload", "null", 0, auth, b"", b"", AAD, b"", h(esp["rfc3602_esp_aes_cbc"][0]["payload"]), h(esp["rfc3602_esp_aes_cbc"][0]["payload"]))
json.dump(dict(_sources={"composite": "cipher parts: vectors.json aes_cbc (SP 800-38A, RFC 3602 cases 1-8); HMAC keys: RFC 2202 case 3 key (SHA-1), RFC 4231 case 2 key zero-padded (SHA-2); ICVs computed by gen_vectors.py with python hmac"}, composite=comp),
          open(os.path.join(HERE, "composite.json"), "w"), indent=1)
print("ok:", len(aes_cbc), "cbc,", len(hmacs), "hmac,", len(aeads), "aead,", len(comp), "composite")
