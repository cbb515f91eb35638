package ipsec

import (
	"bufio"
	"bytes"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// LedgerOptions configure OpenNonceLedger.
type LedgerOptions struct{}

// ErrLedgerCorrupt is wrapped by the errors of OpenNonceLedger (and of
// Apply, Sync and Close) when the ledger file cannot be trusted: bad
// header, bad entry, missing or wrong end line (truncation), or a ledger
// key other than the one the process opened.
var ErrLedgerCorrupt = errors.New("nonce ledger corrupt")

// ledgerMagic starts the first line of a ledger file.
const ledgerMagic = "keel-esp-nonces v1"

// ledgerFile is the on-disk form of a NonceLedger:
//
//	keel-esp-nonces v1 <ledger key, 64 hex digits>
//	<key id, 64 hex digits> <highest number reserved, decimal>
//	...
//	end <number of entries> <CRC-32 (IEEE) of the lines above, 8 hex digits>
//
// A key id is HMAC-SHA-256(ledger key, cipher | key bits | key and salt):
// with the ledger key next to it, it is as strong as a salted hash, so the
// file is written 0600 (it holds no key material, but a low-entropy ASCII
// key could be guessed from it). The file is replaced whole (temporary
// file, fsync, rename, fsync of the directory) under an exclusive lock on
// path+".lock" that every writer takes for a read-modify-write, so several
// processes may share one file.
type ledgerFile struct {
	path string
}

// OpenNonceLedger opens the ledger file at path, creating it (and its
// directory, 0700) with a new random ledger key when it does not exist, and
// returns a ledger that starts every known key above the number reserved
// for it. A file that exists but cannot be parsed is an error wrapping
// ErrLedgerCorrupt naming the file and line: the caller must not fall back
// to an empty ledger, since that would reuse nonces of the keys it held
// (keel's ipsec service refuses to start). To recover, re-key every AEAD
// SA, then remove the file.
//
// The returned ledger is safe for concurrent use; Close it to record
// unused numbers (see NonceLedger.Close).
func OpenNonceLedger(path string, opts LedgerOptions) (*NonceLedger, error) {
	if path == "" {
		return nil, errors.New("nonce ledger: empty path")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("nonce ledger: %w", err)
	}
	f := &ledgerFile{path: path}
	unlock, err := f.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	l := newLedger()
	l.file = f
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if _, err := crand.Read(l.key[:]); err != nil {
			return nil, fmt.Errorf("nonce ledger %s: %w", path, err)
		}
		if err := f.write(l.key, nil); err != nil {
			return nil, err
		}
		return l, nil
	case err != nil:
		return nil, fmt.Errorf("nonce ledger: %w", err)
	}
	key, m, err := parseLedger(path, data)
	if err != nil {
		return nil, err
	}
	l.key = key
	for id, v := range m {
		l.m[id] = &nonceEntry{next: v, disk: v}
	}
	return l, nil
}

// read returns the entries of the file, which must carry key.
func (f *ledgerFile) read(key [32]byte) (map[[32]byte]uint64, error) {
	data, err := os.ReadFile(f.path)
	if err != nil {
		return nil, fmt.Errorf("nonce ledger: %w", err)
	}
	k, m, err := parseLedger(f.path, data)
	if err != nil {
		return nil, err
	}
	if k != key {
		return nil, fmt.Errorf("nonce ledger %s: line 1: %w: ledger key changed since it was opened (file replaced?)", f.path, ErrLedgerCorrupt)
	}
	return m, nil
}

// parseLedger parses a ledger file; errors name path and line.
func parseLedger(path string, data []byte) (key [32]byte, m map[[32]byte]uint64, err error) {
	bad := func(line int, format string, args ...any) error {
		return fmt.Errorf("nonce ledger %s: line %d: %w: %s", path, line, ErrLedgerCorrupt, fmt.Sprintf(format, args...))
	}
	m = map[[32]byte]uint64{}
	if len(data) == 0 {
		return key, nil, bad(1, "empty file (truncated?)")
	}
	off, line, ended := 0, 0, false
	for off < len(data) {
		line++
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			return key, nil, bad(line, "no newline at end of file (truncated?)")
		}
		text := string(data[off : off+i])
		start := off
		off += i + 1
		if ended {
			return key, nil, bad(line, "data after the end line")
		}
		f := strings.Fields(text)
		switch {
		case line == 1:
			h, ok := strings.CutPrefix(text, ledgerMagic+" ")
			if !ok {
				return key, nil, bad(line, "want header %q followed by the ledger key", ledgerMagic)
			}
			if err := decodeID(h, &key); err != nil {
				return key, nil, bad(line, "ledger key: %v", err)
			}
		case len(f) == 3 && f[0] == "end":
			n, err := strconv.Atoi(f[1])
			if err != nil || n != len(m) {
				return key, nil, bad(line, "end line counts %q entries, file has %d (truncated?)", f[1], len(m))
			}
			if want := fmt.Sprintf("%08x", crc32.ChecksumIEEE(data[:start])); f[2] != want {
				return key, nil, bad(line, "checksum %s, want %s", f[2], want)
			}
			ended = true
		case len(f) == 2:
			var id [32]byte
			if err := decodeID(f[0], &id); err != nil {
				return key, nil, bad(line, "key id: %v", err)
			}
			v, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				return key, nil, bad(line, "reserved number: %v", err)
			}
			if _, dup := m[id]; dup {
				return key, nil, bad(line, "duplicate key id")
			}
			m[id] = v
		default:
			return key, nil, bad(line, "want \"<key id> <number>\" or the end line, got %d fields", len(f))
		}
	}
	if !ended {
		return key, nil, bad(line, "no end line (truncated?)")
	}
	return key, m, nil
}

func decodeID(s string, id *[32]byte) error {
	if len(s) != 64 {
		return fmt.Errorf("want 64 hex digits, got %d characters", len(s))
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return errors.New("not hexadecimal")
	}
	return nil
}

// write replaces the file with key and m, durably.
func (f *ledgerFile) write(key [32]byte, m map[[32]byte]uint64) error {
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	fmt.Fprintf(w, "%s %x\n", ledgerMagic, key[:])
	ids := make([][32]byte, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b [32]byte) int { return bytes.Compare(a[:], b[:]) })
	for _, id := range ids {
		fmt.Fprintf(w, "%x %d\n", id[:], m[id])
	}
	_ = w.Flush()
	fmt.Fprintf(&b, "end %d %08x\n", len(ids), crc32.ChecksumIEEE(b.Bytes()))
	fail := func(err error) error { return fmt.Errorf("nonce ledger %s: write: %w", f.path, err) }
	tmp := f.path + ".tmp"
	t, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fail(err)
	}
	_, err = t.Write(b.Bytes())
	if err == nil {
		err = t.Sync()
	}
	if cerr := t.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, f.path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fail(err)
	}
	if d, err := os.Open(filepath.Dir(f.path)); err == nil {
		err = d.Sync()
		_ = d.Close()
		if err != nil {
			return fail(err)
		}
	}
	return nil
}

// lock takes the exclusive lock of the file's read-modify-write.
func (f *ledgerFile) lock() (unlock func(), err error) {
	lf, err := os.OpenFile(f.path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("nonce ledger: %w", err)
	}
	if err := flockExclusive(lf); err != nil {
		_ = lf.Close()
		return nil, fmt.Errorf("nonce ledger %s: lock: %w", f.path, err)
	}
	return func() {
		_ = flockUnlock(lf)
		_ = lf.Close()
	}, nil
}
