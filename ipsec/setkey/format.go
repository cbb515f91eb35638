package setkey

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/ipsec/spd"
)

// Format writes cfg back in canonical setkey syntax, one statement per
// line, with every key replaced by "[redacted N bytes]" (so the output is
// for display, e.g. keelctl ipsec, and does not parse back). It never
// prints key material.
func Format(cfg *Config) string {
	return format(cfg, false)
}

func format(cfg *Config, withKeys bool) string {
	var b strings.Builder
	if cfg == nil {
		return ""
	}
	for i := range cfg.Ops {
		op := &cfg.Ops[i]
		switch op.Kind {
		case OpFlush:
			b.WriteString("flush;\n")
		case OpSPDFlush:
			b.WriteString("spdflush;\n")
		case OpAdd:
			b.WriteString("add ")
			formatSA(&b, op.SA, withKeys, true)
			b.WriteString(";\n")
		case OpDelete:
			b.WriteString("delete ")
			formatSA(&b, op.SA, false, false)
			b.WriteString(";\n")
		case OpSPDAdd:
			b.WriteString("spdadd ")
			b.WriteString(op.Policy.String())
			b.WriteString(";\n")
		case OpSPDDelete:
			b.WriteString("spddelete ")
			b.WriteString(op.Policy.Sel.String())
			b.WriteString(" -P ")
			b.WriteString(op.Policy.Dir.String())
			b.WriteString(";\n")
		}
	}
	return b.String()
}

func formatAddr(b *strings.Builder, ap netip.AddrPort, proto Proto) {
	b.WriteString(ap.Addr().String())
	if proto == ProtoESPUDP {
		fmt.Fprintf(b, "[%d]", ap.Port())
	}
}

var cipherNames = map[crypto.Cipher]string{
	crypto.CipherNull:             "null",
	crypto.CipherAESCBC:           "rijndael-cbc",
	crypto.CipherAESGCM:           "aes-gcm-16",
	crypto.CipherChaCha20Poly1305: "chacha20-poly1305",
}

var authNames = map[crypto.Auth]string{
	crypto.AuthNone:           "null",
	crypto.AuthHMACSHA1_96:    "hmac-sha1",
	crypto.AuthHMACSHA256_128: "hmac-sha2-256",
	crypto.AuthHMACSHA384_192: "hmac-sha2-384",
	crypto.AuthHMACSHA512_256: "hmac-sha2-512",
}

func formatKey(b *strings.Builder, k []byte, withKeys bool) {
	if withKeys {
		b.WriteString("0x")
		b.WriteString(hex.EncodeToString(k))
		return
	}
	fmt.Fprintf(b, "[redacted %d bytes]", len(k))
}

// formatSA writes "src dst proto spi" and, if full, the options and
// algorithms. Keys are printed only when withKeys (tests only).
func formatSA(b *strings.Builder, sa *SA, withKeys, full bool) {
	if sa == nil {
		b.WriteString("<nil>")
		return
	}
	formatAddr(b, sa.Src, sa.Proto)
	b.WriteByte(' ')
	formatAddr(b, sa.Dst, sa.Proto)
	fmt.Fprintf(b, " %s 0x%x", sa.Proto, sa.SPI)
	if !full {
		return
	}
	if sa.Mode != spd.ModeAny {
		fmt.Fprintf(b, " -m %s", sa.Mode)
	}
	if sa.ReplayWindow != DefaultReplayWindow {
		fmt.Fprintf(b, " -r %d", sa.ReplayWindow/8)
	}
	if sa.ReqID != 0 {
		fmt.Fprintf(b, " -u %d", sa.ReqID)
	}
	if sa.ESN {
		b.WriteString(" -f esn")
	}
	if sa.HardTime != 0 {
		fmt.Fprintf(b, " -lh %d", int64(sa.HardTime/time.Second))
	}
	if sa.SoftTime != 0 {
		fmt.Fprintf(b, " -ls %d", int64(sa.SoftTime/time.Second))
	}
	if sa.HardBytes != 0 {
		fmt.Fprintf(b, " -bh %d", sa.HardBytes)
	}
	if sa.SoftBytes != 0 {
		fmt.Fprintf(b, " -bs %d", sa.SoftBytes)
	}
	b.WriteString(" -E ")
	b.WriteString(cipherNames[sa.Alg.Cipher])
	if sa.Alg.Cipher != crypto.CipherNull {
		b.WriteByte(' ')
		formatKey(b, sa.EncKey, withKeys)
	}
	if sa.Alg.Auth != crypto.AuthNone {
		b.WriteString(" -A ")
		b.WriteString(authNames[sa.Alg.Auth])
		b.WriteByte(' ')
		formatKey(b, sa.AuthKey, withKeys)
	}
}
