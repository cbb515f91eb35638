// Package keyedhash computes HMAC-SHA-256 over key material without
// leaving copies of the key or the message in memory nobody wipes (see
// Sum).
package keyedhash

import (
	"crypto/sha256"
	"hash"
	"sync"
)

// Sum returns HMAC-SHA-256(key, parts...) (RFC 2104) without leaving
// a copy of key or of parts (which hold SA keys) in memory that nobody
// wipes. crypto/hmac keeps the key in pad buffers it never clears and
// both it and crypto/sha256 leave the message's last partial block in the
// digest and in Sum's copy of it on the stack; here:
//   - the pads and the inner digest are in a keyHasher we own and clear;
//   - after each Sum the digest's block buffer is overwritten with zeros
//     (Reset does not clear it: 63 zero bytes are buffered, then a 64th
//     makes it process the block), and a Sum of that all-zero buffer made
//     through the same call path (keyHasher.sum, not inlined) overwrites
//     the stack slots of the first Sum's copy and padding.
//
// What stays: the SHA-256 chaining state after the key block (a one-way
// function of the key, overwritten by the next use) and anything a stack
// growth copied away in the middle (the runtime frees the old stack
// without clearing it). TestSumWipes (here) and ipsec's TestKeyMaterialWiped scan the
// process's memory for what was hashed.
func Sum(key []byte, parts ...[]byte) [32]byte {
	k := keyHashers.Get().(*keyHasher)
	defer keyHashers.Put(k)
	key = k.blockKey(key)
	for i := range k.pad {
		k.pad[i] = 0x36
	}
	for i, b := range key {
		k.pad[i] ^= b
	}
	k.h.Write(k.pad[:])
	for _, p := range parts {
		k.h.Write(p)
	}
	k.sum(&k.inner)
	k.scrub()
	for i := range k.pad {
		k.pad[i] = 0x5c
	}
	for i, b := range key {
		k.pad[i] ^= b
	}
	k.h.Write(k.pad[:])
	k.h.Write(k.inner[:])
	k.sum(&k.out)
	out := k.out
	k.scrub()
	clear(k.pad[:])
	clear(k.inner[:])
	clear(k.out[:])
	clear(k.long[:])
	return out
}

// keyHasher is Sum's working memory (pooled: it holds nothing
// between calls).
type keyHasher struct {
	h                hash.Hash
	pad              [sha256.BlockSize]byte
	inner, out, long [sha256.Size]byte
	zero             [sha256.BlockSize]byte
}

var keyHashers = sync.Pool{New: func() any { return &keyHasher{h: sha256.New()} }}

// blockKey returns key, or its SHA-256 (in k.long) when it is longer than
// a block (RFC 2104; Keel's keys are 32 bytes).
func (k *keyHasher) blockKey(key []byte) []byte {
	if len(key) <= sha256.BlockSize {
		return key
	}
	k.h.Write(key)
	k.sum(&k.long)
	k.scrub()
	return k.long[:]
}

// sum writes the digest to dst and resets it. Both Sum's Sums and
// scrub's go through here, so that they use the same stack slots.
//
//go:noinline
func (k *keyHasher) sum(dst *[sha256.Size]byte) {
	k.h.Sum(dst[:0])
	k.h.Reset()
}

// scrub overwrites the digest's block buffer, then Sum's stack copy of
// it, with zeros (see Sum).
func (k *keyHasher) scrub() {
	var discard [sha256.Size]byte
	k.h.Write(k.zero[:sha256.BlockSize-1]) // the buffer's first 63 bytes
	k.h.Write(k.zero[:1])                  // its last: the block is processed
	k.h.Reset()
	k.h.Write(k.zero[:sha256.BlockSize-1])
	k.sum(&discard) // Sum of an all-zero buffer over the first one's slots
}
