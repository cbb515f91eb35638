// Package spec holds what the virtio-crypto driver (package virtio) and
// the emulated device (package device) share: the virtio-crypto constants
// and request layouts (virtio 1.2, section 5.9), the layout of the shared
// memory region, and the vhost-user-style setup protocol on the unix
// socket between the two processes.
//
// Request layouts follow the spec's structures (little endian):
//
//	control request (device-readable):
//	  virtio_crypto_ctrl_header {le32 opcode; le32 algo; le32 flag; le32 queue_id}   16 bytes
//	  union of the *_create_session / destroy_session requests                    56 bytes
//	  keys (cipher key, then auth key)                                            variable
//	control result (device-writable):
//	  create:  virtio_crypto_session_input {le64 session_id; le32 status; le32 padding}
//	  destroy: virtio_crypto_inhdr {u8 status}
//
//	data request (device-readable):
//	  virtio_crypto_op_header {le32 opcode; le32 algo; le64 session_id; le32 flag; le32 padding}  24 bytes
//	  op-specific fixed part (alg_chain_data_flf / aead_data_flf / mac_data_flf)                48 bytes
//	  iv, aad, src_data (and, for AEAD decryption, the tag)
//	data result (device-writable):
//	  dst_data, hash_result or tag, virtio_crypto_inhdr {u8 status}
//
// For ESP encrypt-then-MAC the driver uses algorithm chaining
// (CIPHER_THEN_HASH on encryption, HASH_THEN_CIPHER on decryption) with
// src_data = AAD || IV || payload || ESN-high, cipher over the payload and
// hash over all of it; for NULL encryption it uses the MAC service; for
// GCM and ChaCha20-Poly1305 the AEAD service with iv = salt || IV.
package spec

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Services and opcodes: VIRTIO_CRYPTO_OPCODE(service, op) = service<<8 | op.
const (
	ServiceCipher = 0
	ServiceHash   = 1
	ServiceMAC    = 2
	ServiceAEAD   = 3

	OpCipherEncrypt       = ServiceCipher<<8 | 0x00
	OpCipherDecrypt       = ServiceCipher<<8 | 0x01
	OpCipherCreateSession = ServiceCipher<<8 | 0x02
	OpCipherDestroySess   = ServiceCipher<<8 | 0x03
	OpMAC                 = ServiceMAC<<8 | 0x00
	OpMACCreateSession    = ServiceMAC<<8 | 0x02
	OpMACDestroySession   = ServiceMAC<<8 | 0x03
	OpAEADEncrypt         = ServiceAEAD<<8 | 0x00
	OpAEADDecrypt         = ServiceAEAD<<8 | 0x01
	OpAEADCreateSession   = ServiceAEAD<<8 | 0x02
	OpAEADDestroySession  = ServiceAEAD<<8 | 0x03
)

// Status codes (enum VIRTIO_CRYPTO_*).
const (
	StatusOK          = 0
	StatusErr         = 1
	StatusBadMsg      = 2
	StatusNotSupp     = 3
	StatusInvSess     = 4
	StatusNoSpc       = 5
	StatusKeyRejected = 6
)

// StatusString names a status code.
func StatusString(s uint8) string {
	switch s {
	case StatusOK:
		return "OK"
	case StatusErr:
		return "ERR"
	case StatusBadMsg:
		return "BADMSG"
	case StatusNotSupp:
		return "NOTSUPP"
	case StatusInvSess:
		return "INVSESS"
	case StatusNoSpc:
		return "NOSPC"
	case StatusKeyRejected:
		return "KEY_REJECTED"
	}
	return fmt.Sprintf("status(%d)", s)
}

// Algorithm identifiers.
const (
	CipherAESCBC = 3 // VIRTIO_CRYPTO_CIPHER_AES_CBC

	MACHMACSHA1   = 2 // VIRTIO_CRYPTO_MAC_HMAC_SHA1
	MACHMACSHA256 = 4
	MACHMACSHA384 = 5
	MACHMACSHA512 = 6

	AEADGCM              = 1 // VIRTIO_CRYPTO_AEAD_GCM
	AEADChaCha20Poly1305 = 3 // VIRTIO_CRYPTO_AEAD_CHACHA20_POLY1305
)

// Symmetric op types and chaining parameters.
const (
	SymOpNone     = 0
	SymOpCipher   = 1
	SymOpChaining = 2

	ChainHashThenCipher = 1
	ChainCipherThenHash = 2

	HashModeAuth = 2 // VIRTIO_CRYPTO_SYM_HASH_MODE_AUTH

	DirEncrypt = 1 // VIRTIO_CRYPTO_OP_ENCRYPT
	DirDecrypt = 2 // VIRTIO_CRYPTO_OP_DECRYPT
)

// Fixed sizes.
const (
	CtrlHeaderLen   = 16
	CtrlUnionLen    = 56
	CtrlReqLen      = CtrlHeaderLen + CtrlUnionLen // 72
	SessionInputLen = 16
	OpHeaderLen     = 24
	OpFlfLen        = 48
	OpReqLen        = OpHeaderLen + OpFlfLen // 72
)

// CreateSession is a decoded CREATE_SESSION request.
type CreateSession struct {
	Opcode uint32
	// Cipher (cipher and chaining sessions).
	CipherAlgo uint32
	CipherKey  []byte
	Dir        uint32
	// SymOp is SymOpCipher or SymOpChaining for cipher-service sessions.
	SymOp      uint32
	ChainOrder uint32
	// MAC (chaining and MAC sessions).
	MACAlgo uint32
	HashLen uint32
	AuthKey []byte
	// AEAD.
	AEADAlgo uint32
	AEADKey  []byte
	TagLen   uint32
	AADLen   uint32
}

// ErrBadMsg reports a malformed request (mapped to VIRTIO_CRYPTO_BADMSG).
var ErrBadMsg = errors.New("virtio-crypto: malformed request")

var le = binary.LittleEndian

// EncodeCreate writes a control request for c into b and returns its
// length. Keys follow the fixed part.
func EncodeCreate(b []byte, c *CreateSession) (int, error) {
	n := CtrlReqLen + len(c.CipherKey) + len(c.AuthKey) + len(c.AEADKey)
	if len(b) < n {
		return 0, fmt.Errorf("virtio-crypto: control buffer of %d bytes, need %d", len(b), n)
	}
	clear(b[:CtrlReqLen])
	le.PutUint32(b[0:], c.Opcode)
	u := b[CtrlHeaderLen:]
	switch c.Opcode {
	case OpCipherCreateSession:
		le.PutUint32(b[4:], c.CipherAlgo)
		// virtio_crypto_sym_create_session_req: union (48 bytes), op_type.
		if c.SymOp == SymOpCipher {
			// cipher_session_para {algo, keylen, op, padding}
			le.PutUint32(u[0:], c.CipherAlgo)
			le.PutUint32(u[4:], uint32(len(c.CipherKey)))
			le.PutUint32(u[8:], c.Dir)
		} else {
			// alg_chain_session_para {order, hash_mode, cipher_param(16),
			// mac_setup {algo, hash_result_len, auth_key_len, pad}, aad_len, pad}
			le.PutUint32(u[0:], c.ChainOrder)
			le.PutUint32(u[4:], HashModeAuth)
			le.PutUint32(u[8:], c.CipherAlgo)
			le.PutUint32(u[12:], uint32(len(c.CipherKey)))
			le.PutUint32(u[16:], c.Dir)
			le.PutUint32(u[24:], c.MACAlgo)
			le.PutUint32(u[28:], c.HashLen)
			le.PutUint32(u[32:], uint32(len(c.AuthKey)))
			le.PutUint32(u[40:], c.AADLen)
		}
		le.PutUint32(u[48:], c.SymOp)
	case OpMACCreateSession:
		le.PutUint32(b[4:], c.MACAlgo)
		le.PutUint32(u[0:], c.MACAlgo)
		le.PutUint32(u[4:], c.HashLen)
		le.PutUint32(u[8:], uint32(len(c.AuthKey)))
	case OpAEADCreateSession:
		le.PutUint32(b[4:], c.AEADAlgo)
		le.PutUint32(u[0:], c.AEADAlgo)
		le.PutUint32(u[4:], uint32(len(c.AEADKey)))
		le.PutUint32(u[8:], c.TagLen)
		le.PutUint32(u[12:], c.AADLen)
		le.PutUint32(u[16:], c.Dir)
	default:
		return 0, fmt.Errorf("virtio-crypto: opcode %#x is not a create-session opcode", c.Opcode)
	}
	off := CtrlReqLen
	off += copy(b[off:], c.CipherKey)
	off += copy(b[off:], c.AuthKey)
	off += copy(b[off:], c.AEADKey)
	return off, nil
}

// DecodeCreate parses a control request; the key slices alias b.
func DecodeCreate(b []byte) (*CreateSession, error) {
	if len(b) < CtrlReqLen {
		return nil, fmt.Errorf("%w: control request of %d bytes", ErrBadMsg, len(b))
	}
	c := &CreateSession{Opcode: le.Uint32(b[0:])}
	u := b[CtrlHeaderLen:]
	var ck, ak, aeadk uint32
	switch c.Opcode {
	case OpCipherCreateSession:
		c.SymOp = le.Uint32(u[48:])
		switch c.SymOp {
		case SymOpCipher:
			c.CipherAlgo, ck, c.Dir = le.Uint32(u[0:]), le.Uint32(u[4:]), le.Uint32(u[8:])
		case SymOpChaining:
			c.ChainOrder = le.Uint32(u[0:])
			if le.Uint32(u[4:]) != HashModeAuth {
				return nil, fmt.Errorf("%w: hash mode %d", ErrBadMsg, le.Uint32(u[4:]))
			}
			c.CipherAlgo, ck, c.Dir = le.Uint32(u[8:]), le.Uint32(u[12:]), le.Uint32(u[16:])
			c.MACAlgo, c.HashLen, ak = le.Uint32(u[24:]), le.Uint32(u[28:]), le.Uint32(u[32:])
			c.AADLen = le.Uint32(u[40:])
		default:
			return nil, fmt.Errorf("%w: sym op type %d", ErrBadMsg, c.SymOp)
		}
	case OpMACCreateSession:
		c.MACAlgo, c.HashLen, ak = le.Uint32(u[0:]), le.Uint32(u[4:]), le.Uint32(u[8:])
	case OpAEADCreateSession:
		c.AEADAlgo, aeadk, c.TagLen, c.AADLen, c.Dir = le.Uint32(u[0:]), le.Uint32(u[4:]), le.Uint32(u[8:]), le.Uint32(u[12:]), le.Uint32(u[16:])
	default:
		return nil, fmt.Errorf("%w: opcode %#x", ErrBadMsg, c.Opcode)
	}
	rest := b[CtrlReqLen:]
	if uint64(ck)+uint64(ak)+uint64(aeadk) > uint64(len(rest)) {
		return nil, fmt.Errorf("%w: keys of %d bytes in a %d-byte tail", ErrBadMsg, uint64(ck)+uint64(ak)+uint64(aeadk), len(rest))
	}
	c.CipherKey, rest = rest[:ck:ck], rest[ck:]
	c.AuthKey, rest = rest[:ak:ak], rest[ak:]
	c.AEADKey = rest[:aeadk:aeadk]
	return c, nil
}

// EncodeDestroy writes a DESTROY_SESSION request for the service's opcode.
func EncodeDestroy(b []byte, opcode uint32, id uint64) int {
	clear(b[:CtrlReqLen])
	le.PutUint32(b[0:], opcode)
	le.PutUint64(b[CtrlHeaderLen:], id)
	return CtrlReqLen
}

// DestroyID returns the session id of a DESTROY_SESSION request.
func DestroyID(b []byte) uint64 { return le.Uint64(b[CtrlHeaderLen:]) }

// IsDestroy reports whether opcode is a destroy-session opcode.
func IsDestroy(op uint32) bool {
	return op == OpCipherDestroySess || op == OpMACDestroySession || op == OpAEADDestroySession
}

// OpReq is the fixed part of a data request.
type OpReq struct {
	Opcode    uint32
	Algo      uint32
	SessionID uint64
	// Lengths of the variable parts.
	IVLen     uint32
	AADLen    uint32 // AEAD only
	SrcLen    uint32
	DstLen    uint32
	HashLen   uint32 // hash_result_len or tag_len
	CipherOff uint32 // chaining: cipher_start_src_offset
	CipherLen uint32 // chaining: len_to_cipher
}

// EncodeOp writes the 72-byte fixed part.
func EncodeOp(b []byte, o *OpReq) {
	clear(b[:OpReqLen])
	le.PutUint32(b[0:], o.Opcode)
	le.PutUint32(b[4:], o.Algo)
	le.PutUint64(b[8:], o.SessionID)
	f := b[OpHeaderLen:]
	le.PutUint32(f[0:], o.IVLen)
	le.PutUint32(f[4:], o.SrcLen)
	le.PutUint32(f[8:], o.DstLen)
	le.PutUint32(f[12:], o.CipherOff)
	le.PutUint32(f[16:], o.CipherLen)
	le.PutUint32(f[20:], 0)        // hash_start_src_offset
	le.PutUint32(f[24:], o.SrcLen) // len_to_hash
	le.PutUint32(f[28:], o.AADLen)
	le.PutUint32(f[32:], o.HashLen)
}

// DecodeOp parses the fixed part.
func DecodeOp(b []byte, o *OpReq) error {
	if len(b) < OpReqLen {
		return fmt.Errorf("%w: data request of %d bytes", ErrBadMsg, len(b))
	}
	o.Opcode, o.Algo, o.SessionID = le.Uint32(b[0:]), le.Uint32(b[4:]), le.Uint64(b[8:])
	f := b[OpHeaderLen:]
	o.IVLen, o.SrcLen, o.DstLen = le.Uint32(f[0:]), le.Uint32(f[4:]), le.Uint32(f[8:])
	o.CipherOff, o.CipherLen = le.Uint32(f[12:]), le.Uint32(f[16:])
	o.AADLen, o.HashLen = le.Uint32(f[28:]), le.Uint32(f[32:])
	return nil
}
