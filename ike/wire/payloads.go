package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// KE is the Key Exchange payload (§3.4).
type KE struct {
	Group uint16
	Data  []byte
}

// Type returns PayloadKE.
func (*KE) Type() PayloadType { return PayloadKE }

func (k *KE) appendBody(b []byte) ([]byte, error) {
	b = append(b, uint8(k.Group>>8), uint8(k.Group), 0, 0)
	return append(b, k.Data...), nil
}

func parseKE(b []byte) (*KE, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%d bytes, shorter than the group and reserved field", len(b))
	}
	if len(b) == 4 {
		return nil, errors.New("no key exchange data")
	}
	return &KE{Group: binary.BigEndian.Uint16(b), Data: clone(b[4:])}, nil
}

// Nonce is the Nonce payload (§3.9), 16 to 256 octets.
type Nonce struct {
	Data []byte
}

// Nonce lengths §3.9 allows.
const (
	MinNonceLen = 16
	MaxNonceLen = 256
)

// Type returns PayloadNonce.
func (*Nonce) Type() PayloadType { return PayloadNonce }

// String hides the nonce: it is input to the key derivation.
func (n *Nonce) String() string { return fmt.Sprintf("Nonce(%d bytes)", len(n.Data)) }

func (n *Nonce) appendBody(b []byte) ([]byte, error) { return append(b, n.Data...), nil }

func parseNonce(b []byte) (*Nonce, error) {
	if len(b) < MinNonceLen || len(b) > MaxNonceLen {
		return nil, fmt.Errorf("nonce of %d bytes, want %d to %d", len(b), MinNonceLen, MaxNonceLen)
	}
	return &Nonce{Data: clone(b)}, nil
}

// ID is an Identification payload (§3.5): IDi, or IDr when Responder.
type ID struct {
	Responder bool
	IDType    IDType
	Data      []byte
}

// Type returns PayloadIDi or PayloadIDr.
func (p *ID) Type() PayloadType {
	if p.Responder {
		return PayloadIDr
	}
	return PayloadIDi
}

// Body returns the payload body (ID type, reserved, data): the octets the
// AUTH computation (§2.15) hashes as RestOfIDPayload, with the type.
func (p *ID) Body() []byte {
	b, _ := p.appendBody(nil)
	return b
}

func (p *ID) appendBody(b []byte) ([]byte, error) {
	b = append(b, uint8(p.IDType), 0, 0, 0)
	return append(b, p.Data...), nil
}

func parseID(b []byte, responder bool) (*ID, error) {
	if len(b) < 5 {
		return nil, fmt.Errorf("%d bytes, need the type, reserved field and data", len(b))
	}
	p := &ID{Responder: responder, IDType: IDType(b[0]), Data: clone(b[4:])}
	switch {
	case p.IDType == ID_IPV4_ADDR && len(p.Data) != 4:
		return nil, fmt.Errorf("ID_IPV4_ADDR of %d bytes", len(p.Data))
	case p.IDType == ID_IPV6_ADDR && len(p.Data) != 16:
		return nil, fmt.Errorf("ID_IPV6_ADDR of %d bytes", len(p.Data))
	}
	return p, nil
}

// Cert is a CERT payload (§3.6), or a CERTREQ (§3.7) when Request; the
// data stays raw (a DER certificate, or concatenated CA key hashes).
type Cert struct {
	Request  bool
	Encoding uint8
	Data     []byte
}

// Certificate encodings.
const (
	CertX509Signature uint8 = 4
)

// Type returns PayloadCERT or PayloadCERTREQ.
func (c *Cert) Type() PayloadType {
	if c.Request {
		return PayloadCERTREQ
	}
	return PayloadCERT
}

func (c *Cert) appendBody(b []byte) ([]byte, error) {
	b = append(b, c.Encoding)
	return append(b, c.Data...), nil
}

func parseCert(b []byte, req bool) (*Cert, error) {
	if len(b) < 1 {
		return nil, errors.New("no encoding field")
	}
	if !req && len(b) == 1 {
		return nil, errors.New("no certificate data")
	}
	return &Cert{Request: req, Encoding: b[0], Data: clone(b[1:])}, nil
}

// Auth is the Authentication payload (§3.8).
type Auth struct {
	Method AuthMethod
	Data   []byte
}

// Type returns PayloadAUTH.
func (*Auth) Type() PayloadType { return PayloadAUTH }

func (a *Auth) appendBody(b []byte) ([]byte, error) {
	b = append(b, uint8(a.Method), 0, 0, 0)
	return append(b, a.Data...), nil
}

func parseAuth(b []byte) (*Auth, error) {
	if len(b) < 5 {
		return nil, fmt.Errorf("%d bytes, need the method, reserved field and data", len(b))
	}
	return &Auth{Method: AuthMethod(b[0]), Data: clone(b[4:])}, nil
}

// Notify is the Notify payload (§3.10).
type Notify struct {
	Protocol ProtocolID
	SPI      []byte
	Code     NotifyType
	Data     []byte
}

// Type returns PayloadN.
func (*Notify) Type() PayloadType { return PayloadN }

func (n *Notify) appendBody(b []byte) ([]byte, error) {
	if len(n.SPI) > 255 {
		return nil, fmt.Errorf("SPI of %d bytes", len(n.SPI))
	}
	b = append(b, uint8(n.Protocol), uint8(len(n.SPI)), uint8(n.Code>>8), uint8(n.Code))
	b = append(b, n.SPI...)
	return append(b, n.Data...), nil
}

func parseNotify(b []byte) (*Notify, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%d bytes, shorter than the notify header", len(b))
	}
	spiLen := int(b[1])
	if 4+spiLen > len(b) {
		return nil, fmt.Errorf("SPI of %d bytes overruns the payload", spiLen)
	}
	return &Notify{Protocol: ProtocolID(b[0]), Code: NotifyType(binary.BigEndian.Uint16(b[2:])),
		SPI: clone(b[4 : 4+spiLen]), Data: clone(b[4+spiLen:])}, nil
}

// Delete is the Delete payload (§3.11): an IKE SA (no SPIs) or CHILD_SAs.
type Delete struct {
	Protocol ProtocolID
	SPISize  uint8
	SPIs     [][]byte
}

// Type returns PayloadD.
func (*Delete) Type() PayloadType { return PayloadD }

func (d *Delete) appendBody(b []byte) ([]byte, error) {
	if len(d.SPIs) > 0xffff {
		return nil, fmt.Errorf("%d SPIs", len(d.SPIs))
	}
	b = append(b, uint8(d.Protocol), d.SPISize, uint8(len(d.SPIs)>>8), uint8(len(d.SPIs)))
	for _, s := range d.SPIs {
		if len(s) != int(d.SPISize) {
			return nil, fmt.Errorf("SPI of %d bytes, SPI size %d", len(s), d.SPISize)
		}
		b = append(b, s...)
	}
	return b, nil
}

func parseDelete(b []byte) (*Delete, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%d bytes, shorter than the delete header", len(b))
	}
	d := &Delete{Protocol: ProtocolID(b[0]), SPISize: b[1]}
	n := int(binary.BigEndian.Uint16(b[2:]))
	switch {
	case d.Protocol == ProtoIKE && (d.SPISize != 0 || n != 0):
		return nil, fmt.Errorf("IKE delete with SPI size %d and %d SPIs, want 0 and 0", d.SPISize, n)
	case (d.Protocol == ProtoESP || d.Protocol == ProtoAH) && d.SPISize != 4:
		return nil, fmt.Errorf("%s delete with SPI size %d, want 4", d.Protocol, d.SPISize)
	}
	if len(b)-4 != n*int(d.SPISize) {
		return nil, fmt.Errorf("%d SPIs of %d bytes, but %d bytes follow", n, d.SPISize, len(b)-4)
	}
	for i := 0; i < n; i++ {
		o := 4 + i*int(d.SPISize)
		d.SPIs = append(d.SPIs, clone(b[o:o+int(d.SPISize)]))
	}
	return d, nil
}

// VendorID is the Vendor ID payload (§3.12).
type VendorID struct {
	Data []byte
}

// Type returns PayloadV.
func (*VendorID) Type() PayloadType { return PayloadV }

func (v *VendorID) appendBody(b []byte) ([]byte, error) { return append(b, v.Data...), nil }
