package virtio

import (
	"context"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"runtime"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/virtio/spec"
)

type sessKind uint8

const (
	sessChain sessKind = iota // AES-CBC + HMAC: algorithm chaining
	sessMAC                   // NULL + HMAC: MAC service
	sessAEAD                  // AES-GCM, ChaCha20-Poly1305: AEAD service
)

// session is a Keel session: one or two device sessions (encrypt and
// decrypt, as the spec's sessions have a direction) on one data queue.
type session struct {
	p            *Provider
	v            *vq
	alg          crypto.Algorithm
	kind         sessKind
	algo         uint32
	encID, decID uint64
	destroyOp    uint32
	salt         [4]byte
	icvLen       int
	done         crypto.CompletionFunc

	// guarded by v.mu
	closed      bool
	outstanding int
	idle        chan struct{}
}

// ctrlOp is one control request and its answer.
type ctrlOp struct {
	build func(out []byte) (int, error)
	inLen int
	res   [spec.SessionInputLen]byte
	err   error
}

// ctrl runs the control requests: in ModeAsync all are published with one
// kick and their completions arrive by callback; in ModeDepth1Poll they
// run one by one under the spin lock with a busy poll for each answer.
func (p *Provider) ctrl(ops []*ctrlOp) {
	v := p.vqs[len(p.vqs)-1]
	p.ctrlOps.Add(uint64(len(ops)))
	if p.opts.Mode == ModeDepth1Poll {
		for _, op := range ops {
			for !v.spin.CompareAndSwap(0, 1) {
				runtime.Gosched()
			}
			ch := make(chan struct{}, 1)
			if v.submitCtrl([]*ctrlOp{op}, ch) == nil {
				for v.q.UsedIdx() == v.lastUsed {
					v.mu.Lock()
					dead := v.dead
					v.mu.Unlock()
					if dead != nil {
						break
					}
					runtime.Gosched()
				}
				v.reap()
			}
			v.spin.Store(0)
		}
		return
	}
	ch := make(chan struct{}, len(ops))
	if err := v.submitCtrl(ops, ch); err != nil {
		return
	}
	for range ops {
		<-ch
	}
}

// submitCtrl publishes ops on the control queue (one kick). On error every
// op carries it and nothing was published.
func (v *vq) submitCtrl(ops []*ctrlOp, ch chan struct{}) error {
	v.mu.Lock()
	for len(v.free) < len(ops) && v.dead == nil && !v.stopping {
		v.cond.Wait()
	}
	if v.dead != nil || v.stopping {
		err := v.dead
		if err == nil {
			err = fmt.Errorf("virtio: %w", crypto.ErrClosed)
		}
		v.mu.Unlock()
		for _, op := range ops {
			op.err = err
		}
		return err
	}
	for _, op := range ops {
		i := v.free[len(v.free)-1]
		v.free = v.free[:len(v.free)-1]
		out := v.out(i)
		n, err := op.build(out)
		if err != nil {
			// A programming error in this package; never published.
			panic(err)
		}
		s := &v.slots[i]
		*s = slot{state: slotInflight, kind: kindCtrl, t: v.p.now(), ctrlInLen: op.inLen}
		s.ctrlCB = func(in []byte, err error) {
			op.err = err
			if in != nil {
				copy(op.res[:], in)
			}
			clear(out) // the keys were in the region
			ch <- struct{}{}
		}
		v.publishLocked(i, n, op.inLen)
		v.pushLocked(i)
	}
	v.q.PublishAvail(v.avail)
	v.mu.Unlock()
	v.doKick()
	return nil
}

func createStatus(op *ctrlOp) (uint64, error) {
	if op.err != nil {
		return 0, op.err
	}
	id := binary.LittleEndian.Uint64(op.res[0:])
	st := uint8(binary.LittleEndian.Uint32(op.res[8:]))
	switch st {
	case spec.StatusOK:
		return id, nil
	case spec.StatusNotSupp:
		return 0, fmt.Errorf("virtio: create session: device says NOTSUPP: %w", crypto.ErrUnsupported)
	case spec.StatusKeyRejected:
		return 0, fmt.Errorf("virtio: create session: device says KEY_REJECTED: %w", crypto.ErrKeySize)
	}
	return 0, fmt.Errorf("virtio: create session: device says %s", spec.StatusString(st))
}

// NewSession creates the device sessions for sp (asynchronously on the
// control queue, or depth-1 polled in ModeDepth1Poll) and returns the
// Keel session, bound to one data queue. It fails with
// crypto.ErrUnsupported, crypto.ErrKeySize, or crypto.ErrDeviceGone.
func (p *Provider) NewSession(sp crypto.SessionParams, done crypto.CompletionFunc) (crypto.Session, error) {
	if err := sp.CheckParams(); err != nil {
		return nil, fmt.Errorf("virtio: %w", err)
	}
	if done == nil {
		return nil, fmt.Errorf("virtio: %v: nil completion func", sp.Alg)
	}
	if p.closing.Load() {
		return nil, fmt.Errorf("virtio: %w", crypto.ErrClosed)
	}
	if err := p.Dead(); err != nil {
		return nil, err
	}
	a := sp.Alg
	s := &session{p: p, alg: a, icvLen: a.ICVLen(), done: done}
	s.v = p.vqs[int(p.nextQ.Add(1))%(len(p.vqs)-1)]
	var creates []*spec.CreateSession
	switch {
	case a.Cipher == crypto.CipherAESCBC:
		s.kind, s.algo, s.destroyOp = sessChain, spec.CipherAESCBC, spec.OpCipherDestroySess
		for _, dir := range []uint32{spec.DirEncrypt, spec.DirDecrypt} {
			order := uint32(spec.ChainCipherThenHash)
			if dir == spec.DirDecrypt {
				order = spec.ChainHashThenCipher
			}
			creates = append(creates, &spec.CreateSession{Opcode: spec.OpCipherCreateSession, SymOp: spec.SymOpChaining, ChainOrder: order,
				CipherAlgo: spec.CipherAESCBC, CipherKey: sp.CipherKey, Dir: dir,
				MACAlgo: macAlgo(a.Auth), HashLen: uint32(a.ICVLen()), AuthKey: sp.AuthKey})
		}
	case a.Cipher == crypto.CipherNull:
		s.kind, s.algo, s.destroyOp = sessMAC, macAlgo(a.Auth), spec.OpMACDestroySession
		creates = append(creates, &spec.CreateSession{Opcode: spec.OpMACCreateSession, MACAlgo: s.algo, HashLen: uint32(a.ICVLen()), AuthKey: sp.AuthKey})
	case a.IsAEAD():
		s.kind, s.destroyOp = sessAEAD, spec.OpAEADDestroySession
		s.algo = spec.AEADGCM
		if a.Cipher == crypto.CipherChaCha20Poly1305 {
			s.algo = spec.AEADChaCha20Poly1305
		}
		kl := len(sp.CipherKey) - 4
		copy(s.salt[:], sp.CipherKey[kl:])
		for _, dir := range []uint32{spec.DirEncrypt, spec.DirDecrypt} {
			creates = append(creates, &spec.CreateSession{Opcode: spec.OpAEADCreateSession, AEADAlgo: s.algo, AEADKey: sp.CipherKey[:kl], TagLen: 16, Dir: dir})
		}
	default:
		return nil, fmt.Errorf("virtio: %v: %w", a, crypto.ErrUnsupported)
	}
	if sp.Alg.Cipher == crypto.CipherAESCBC && sp.Alg.Auth == crypto.AuthNone {
		return nil, fmt.Errorf("virtio: %v: %w", a, crypto.ErrUnsupported)
	}
	ops := make([]*ctrlOp, len(creates))
	for k, c := range creates {
		ops[k] = &ctrlOp{inLen: spec.SessionInputLen, build: func(out []byte) (int, error) { return spec.EncodeCreate(out, c) }}
	}
	p.ctrl(ops)
	var ids []uint64
	var firstErr error
	for _, op := range ops {
		id, err := createStatus(op)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		ids = append(ids, id)
	}
	if firstErr != nil {
		s.destroy(ids)
		return nil, firstErr
	}
	s.encID, s.decID = ids[0], ids[len(ids)-1]
	return s, nil
}

// destroy sends DESTROY_SESSION for ids.
func (s *session) destroy(ids []uint64) error {
	if len(ids) == 0 {
		return nil
	}
	ops := make([]*ctrlOp, len(ids))
	for k, id := range ids {
		ops[k] = &ctrlOp{inLen: 1, build: func(out []byte) (int, error) { return spec.EncodeDestroy(out, s.destroyOp, id), nil }}
	}
	s.p.ctrl(ops)
	for _, op := range ops {
		if op.err != nil {
			return op.err
		}
		if op.res[0] != spec.StatusOK {
			return fmt.Errorf("virtio: destroy session: device says %s", spec.StatusString(op.res[0]))
		}
	}
	return nil
}

// validate checks a request against the session (ErrInvalidRequest).
func (s *session) validate(r *crypto.Request) error {
	ivLen := s.alg.IVLen()
	switch {
	case len(r.IV) != ivLen:
		return fmt.Errorf("virtio: request: IV length %d, want %d: %w", len(r.IV), ivLen, crypto.ErrInvalidRequest)
	case len(r.ICV) != s.icvLen:
		return fmt.Errorf("virtio: request: ICV length %d, want %d: %w", len(r.ICV), s.icvLen, crypto.ErrInvalidRequest)
	case len(r.Data) > s.p.opts.MaxData:
		return fmt.Errorf("virtio: request: data length %d exceeds %d: %w", len(r.Data), s.p.opts.MaxData, crypto.ErrInvalidRequest)
	case s.kind == sessChain && len(r.Data)%16 != 0:
		return fmt.Errorf("virtio: request: data length %d is not a multiple of 16: %w", len(r.Data), crypto.ErrInvalidRequest)
	case len(r.AAD) > spec.MaxAAD || len(r.AuthTrailer) > spec.MaxTrailer:
		return fmt.Errorf("virtio: request: AAD %d / trailer %d bytes too long: %w", len(r.AAD), len(r.AuthTrailer), crypto.ErrInvalidRequest)
	}
	return nil
}

// encodeLocked writes request r into slot i and publishes it.
func (s *session) encodeLocked(v *vq, i uint16, sl *slot, r *crypto.Request) {
	out := v.out(i)
	enc := r.Dir == crypto.Encrypt
	var o spec.OpReq
	off := spec.OpReqLen
	switch s.kind {
	case sessChain, sessMAC:
		src := len(r.AAD) + len(r.IV) + len(r.Data) + len(r.AuthTrailer)
		o = spec.OpReq{Opcode: spec.OpMAC, Algo: s.algo, SessionID: s.encID, SrcLen: uint32(src), HashLen: uint32(s.icvLen)}
		if s.kind == sessChain {
			o.Opcode, o.IVLen, o.DstLen = spec.OpCipherEncrypt, 16, uint32(src)
			o.CipherOff, o.CipherLen = uint32(len(r.AAD)+len(r.IV)), uint32(len(r.Data))
			if !enc {
				o.Opcode, o.SessionID = spec.OpCipherDecrypt, s.decID
			}
			off += copy(out[off:], r.IV)
		}
		off += copy(out[off:], r.AAD)
		off += copy(out[off:], r.IV)
		off += copy(out[off:], r.Data)
		off += copy(out[off:], r.AuthTrailer)
		sl.cipherOff = int(o.CipherOff)
	case sessAEAD:
		o = spec.OpReq{Opcode: spec.OpAEADEncrypt, Algo: s.algo, SessionID: s.encID, IVLen: 12, AADLen: uint32(len(r.AAD)),
			SrcLen: uint32(len(r.Data)), DstLen: uint32(len(r.Data)), HashLen: 16}
		if !enc {
			o.Opcode, o.SessionID = spec.OpAEADDecrypt, s.decID
		}
		off += copy(out[off:], s.salt[:])
		off += copy(out[off:], r.IV)
		off += copy(out[off:], r.AAD)
		off += copy(out[off:], r.Data)
		if !enc {
			off += copy(out[off:], r.ICV)
		}
	}
	spec.EncodeOp(out, &o)
	sl.dataLen, sl.dstLen, sl.hashLen = len(r.Data), int(o.DstLen), int(o.HashLen)
	v.publishLocked(i, off, sl.dstLen+sl.hashLen+1)
}

// Submit writes a prefix of reqs onto the session's data queue, as many
// as there are free slots, publishes them with one index update and
// kicks the device once (unless it is polling). It never blocks. Invalid
// requests and requests submitted after the device died are accepted and
// completed with StatusError, in order. After Close it accepts nothing.
func (s *session) Submit(reqs []*crypto.Request) int {
	v := s.v
	v.mu.Lock()
	if s.closed || v.stopping {
		v.mu.Unlock()
		return 0
	}
	now := v.p.now()
	var n, published, prefailed int
	for _, r := range reqs {
		if len(v.free) == 0 {
			break
		}
		i := v.free[len(v.free)-1]
		v.free = v.free[:len(v.free)-1]
		sl := &v.slots[i]
		*sl = slot{state: slotInflight, kind: kindData, req: r, sess: s, t: now, dir: r.Dir}
		if v.dead != nil {
			sl.err, sl.state = v.dead, slotDone
			prefailed++
		} else if err := s.validate(r); err != nil {
			sl.err, sl.state = err, slotDone
			prefailed++
		} else {
			s.encodeLocked(v, i, sl, r)
			published++
		}
		v.pushLocked(i)
		s.outstanding++
		n++
	}
	if published > 0 {
		v.q.PublishAvail(v.avail)
	}
	v.mu.Unlock()
	if published > 0 {
		v.p.batches.Add(1)
		v.p.published.Add(uint64(published))
		v.doKick()
	}
	if prefailed > 0 {
		v.wake()
	}
	return n
}

// finishData sets the request's result from the slot's device-writable
// half. Data and ICV change only on success.
func (v *vq) finishData(i uint16, sl *slot) {
	r, s := sl.req, sl.sess
	if sl.err != nil {
		r.Status, r.Err = crypto.StatusError, sl.err
		return
	}
	in := v.in(i)
	inLen := sl.dstLen + sl.hashLen + 1
	if sl.usedLen == 0 || int(sl.usedLen) > inLen {
		r.Status, r.Err = crypto.StatusError, fmt.Errorf("virtio: device returned %d bytes for a %d-byte result: %w", sl.usedLen, inLen, crypto.ErrDeviceGone)
		return
	}
	st := in[inLen-1]
	enc := sl.dir == crypto.Encrypt
	if st == spec.StatusBadMsg && s.kind == sessAEAD && !enc {
		r.Status, r.Err = crypto.StatusAuthFailed, nil
		return
	}
	if st != spec.StatusOK {
		r.Status, r.Err = crypto.StatusError, fmt.Errorf("virtio: device status %s", spec.StatusString(st))
		return
	}
	hash := in[sl.dstLen : sl.dstLen+sl.hashLen]
	switch s.kind {
	case sessChain, sessMAC:
		if enc {
			if s.kind == sessChain {
				copy(r.Data, in[sl.cipherOff:sl.cipherOff+sl.dataLen])
			}
			copy(r.ICV, hash)
		} else {
			if subtle.ConstantTimeCompare(hash, r.ICV) != 1 {
				r.Status, r.Err = crypto.StatusAuthFailed, nil
				return
			}
			if s.kind == sessChain {
				copy(r.Data, in[sl.cipherOff:sl.cipherOff+sl.dataLen])
			}
		}
	case sessAEAD:
		copy(r.Data, in[:sl.dataLen])
		if enc {
			copy(r.ICV, hash)
		}
	}
	r.Status, r.Err = crypto.StatusOK, nil
}

// Close waits until every request of the session has completed, then
// destroys the device sessions. If ctx ends first, the requests still on
// the device are completed with StatusError (crypto.ErrDeviceGone, Data
// untouched) and their slots retired, since the device may still write
// them. Submit after Close accepts nothing. Close is idempotent.
func (s *session) Close(ctx context.Context) error {
	v := s.v
	v.mu.Lock()
	if s.closed && s.outstanding == 0 && s.encID == 0 {
		v.mu.Unlock()
		return nil
	}
	s.closed = true
	var idle chan struct{}
	if s.outstanding > 0 {
		if s.idle == nil {
			s.idle = make(chan struct{})
		}
		idle = s.idle
	}
	v.mu.Unlock()
	if idle != nil {
		select {
		case <-idle:
		case <-ctx.Done():
			v.mu.Lock()
			for k := 0; k < v.flen; k++ {
				i := v.fifo[(v.fhead+k)%len(v.fifo)]
				sl := &v.slots[i]
				if sl.sess == s && sl.state == slotInflight {
					sl.state = slotDone
					sl.err = fmt.Errorf("virtio: session closed with the request in flight: %w", crypto.ErrDeviceGone)
					sl.leak = true
				}
			}
			v.mu.Unlock()
			v.wake()
			<-idle
		}
	}
	ids := []uint64{s.encID}
	if s.decID != s.encID {
		ids = append(ids, s.decID)
	}
	s.encID, s.decID = 0, 0
	clear(s.salt[:])
	if s.p.Dead() != nil {
		return nil
	}
	return s.destroy(ids)
}
