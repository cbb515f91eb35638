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
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ErrLedgerUnsafe is wrapped by the errors of OpenNonceLedger and
// NonceLedger.Move when the ledger cannot be shown to hold every number
// its keys used (it was lost or rolled back, or a previous ledger cannot
// be carried over) and the policy is NoncePolicyRefuse, and by write errors
// when the file was rolled back while open.
var ErrLedgerUnsafe = errors.New("nonce ledger unsafe")

// NoncePolicy says what OpenNonceLedger does when the ledger is unsafe:
// lost (its file is missing but its record says it was written), rolled
// back (its epoch is older than the one recorded), or not able to carry
// over the previous ledger named by the record (missing, rolled back, or
// holding another ledger key). A safe ledger needs no decision: a key
// without an entry in a complete ledger was never used.
type NoncePolicy string

const (
	// NoncePolicyRefuse (the default) fails the open: no AEAD SA starts
	// and nothing is written, so the condition persists until an operator
	// re-keys and opens with NoncePolicyFreshKeyOnly.
	NoncePolicyRefuse NoncePolicy = "refuse"
	// NoncePolicyFreshKeyOnly opens the ledger taking every key it has no
	// entry for as fresh (the operator re-keyed): such SAs start at 1. Keys
	// a rolled-back ledger does hold are retired (their true high-water
	// mark is unknown): an SA with one is refused until re-keyed. The
	// ledger is then written at a new epoch, so the next open is safe.
	NoncePolicyFreshKeyOnly NoncePolicy = "fresh-key-only"
	// NoncePolicyTrust opens the ledger as it is (the behaviour without a
	// record): keys continue above what the surviving entries say, keys
	// without an entry start at 1. Only for keys that are fresh on every
	// start by construction (an IKE daemon that re-keys at boot).
	NoncePolicyTrust NoncePolicy = "trust"
)

// ParseNoncePolicy returns the policy named s ("" is NoncePolicyRefuse).
func ParseNoncePolicy(s string) (NoncePolicy, error) {
	switch p := NoncePolicy(strings.TrimSpace(s)); p {
	case "":
		return NoncePolicyRefuse, nil
	case NoncePolicyRefuse, NoncePolicyFreshKeyOnly, NoncePolicyTrust:
		return p, nil
	}
	return "", fmt.Errorf("%q is not a nonce policy, expected refuse, fresh-key-only or trust", s)
}

// LedgerOptions configure OpenNonceLedger.
type LedgerOptions struct {
	// Record is the ledger record: a small file naming the ledger file
	// last written and the epoch it was written at. It lets a ledger
	// opened at another path carry over the previous ledger's entries,
	// and tells a lost or rolled-back ledger from a first start. It must
	// stay where it is when the ledger moves. "": path+".record".
	Record string
	// Policy applies when the ledger is unsafe (see NoncePolicy); "" is
	// NoncePolicyRefuse.
	Policy NoncePolicy
	// Log receives the ledger's events: an unsafe ledger opened anyway,
	// keys started without an entry, write failures and their end. Nil:
	// slog.Default().
	Log *slog.Logger
}

func (o LedgerOptions) withDefaults(path string) LedgerOptions {
	if o.Record == "" {
		o.Record = path + ".record"
	}
	if o.Policy == "" {
		o.Policy = NoncePolicyRefuse
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return o
}

// ErrLedgerCorrupt is wrapped by the errors of OpenNonceLedger (and of
// Apply, Sync and Close) when the ledger file cannot be trusted: bad
// header, bad entry, missing or wrong end line (truncation), or a ledger
// key other than the one the process opened.
var ErrLedgerCorrupt = errors.New("nonce ledger corrupt")

// ledgerMagic starts the first line of a ledger file: v2 carries the
// epoch, v1 (read, never written) had none (epoch 0).
const (
	ledgerMagic   = "keel-esp-nonces v2"
	ledgerMagicV1 = "keel-esp-nonces v1"
	recordMagic   = "keel-esp-nonce-record v1"
)

// ledgerFile is the on-disk form of a NonceLedger:
//
//	keel-esp-nonces v2 <ledger key, 64 hex digits> <epoch, decimal>
//	<key id, 64 hex digits> <highest number reserved, decimal>
//	...
//	end <number of entries> <CRC-32 (IEEE) of the lines above, 8 hex digits>
//
// A key id is HMAC-SHA-256(ledger key, cipher | key bits | key and salt):
// with the ledger key next to it, it is as strong as a salted hash, so the
// file is written 0600 (it holds no key material, but a low-entropy ASCII
// key could be guessed from it). The epoch goes up by one on every write;
// after the ledger file, each write replaces the record (see
// LedgerOptions.Record):
//
//	keel-esp-nonce-record v1 <epoch, decimal> <ledger file, absolute>
//	end <CRC-32 (IEEE) of the line above, 8 hex digits>
//
// so that the record is never ahead of the ledger it names (a crash
// between the two leaves the ledger one epoch ahead, which is safe). Both
// are replaced whole (temporary file, fsync, rename, fsync of the
// directory) under an exclusive lock on path+".lock" that every writer
// takes for a read-modify-write, so several processes may share one
// ledger file (each opening it takes record+".lock" first).
type ledgerFile struct {
	path   string
	record string
}

// ledgerData is the content of a ledger file.
type ledgerData struct {
	key   [32]byte
	m     map[[32]byte]uint64
	epoch uint64
}

// OpenNonceLedger opens the ledger file at path and returns a ledger that
// starts every known key above the number reserved for it.
//
// Which file was written last, at which epoch, is kept in opts.Record:
//   - nothing at path and no record: a first start, the file (and its
//     directory, 0700) is created with a new random ledger key;
//   - the record names path: the file must be there at an epoch at least
//     the recorded one, else the ledger is unsafe (lost, rolled back);
//   - the record names another file (the ledger moved: a new
//     ipsec_nonce_ledger or state directory): its entries are carried over
//     into path (created with its ledger key, or merged when path exists
//     with the same key); a previous file that is missing, rolled back or
//     has another ledger key makes the ledger unsafe.
//
// An unsafe ledger is handled by opts.Policy: by default the open fails
// with an error wrapping ErrLedgerUnsafe that says why. A file that exists
// but cannot be parsed is an error wrapping ErrLedgerCorrupt naming the
// file and line: the caller must not fall back to an empty ledger, since
// that would reuse nonces of the keys it held (keel's ipsec service
// refuses to start). To recover from either, re-key every AEAD SA, then
// open with NoncePolicyFreshKeyOnly (after removing a corrupt file).
//
// The returned ledger is safe for concurrent use; Close it to record
// unused numbers (see NonceLedger.Close).
func OpenNonceLedger(path string, opts LedgerOptions) (*NonceLedger, error) {
	if path == "" {
		return nil, errors.New("nonce ledger: empty path")
	}
	opts = opts.withDefaults(path)
	f, d, incident, err := loadLedger(path, opts, nil)
	if err != nil {
		return nil, err
	}
	l := newLedger()
	l.file, l.opts, l.key, l.epoch, l.incident = f, opts, d.key, d.epoch, incident
	for id, v := range d.m {
		l.m[id] = &nonceEntry{next: v, disk: v}
	}
	l.reportIncident()
	return l, nil
}

// moving is a running ledger moving to another file (see Move).
type moving struct {
	key  [32]byte            // kept: installed SAs' key ids depend on it
	path string              // its current file
	m    map[[32]byte]uint64 // every entry it holds (what its file has, or more)
}

// loadLedger opens the ledger file at path as OpenNonceLedger describes
// and writes it (and the record) at a new epoch. from, if set, is a
// running ledger moving there: the file must have its key (or not exist),
// its entries are merged, and its current file needs no reading.
func loadLedger(path string, opts LedgerOptions, from *moving) (*ledgerFile, ledgerData, string, error) {
	var none ledgerData
	if !filepath.IsAbs(path) || !filepath.IsAbs(opts.Record) || strings.ContainsAny(path, "\n\r") || path == opts.Record {
		return nil, none, "", fmt.Errorf("nonce ledger %q (record %q): want two different absolute paths on one line", path, opts.Record)
	}
	for _, dir := range []string{filepath.Dir(path), filepath.Dir(opts.Record)} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, none, "", fmt.Errorf("nonce ledger: %w", err)
		}
	}
	unlockRecord, err := lockPath(opts.Record + ".lock")
	if err != nil {
		return nil, none, "", err
	}
	defer unlockRecord()
	f := &ledgerFile{path: path, record: opts.Record}
	unlock, err := f.lock()
	if err != nil {
		return nil, none, "", err
	}
	defer unlock()
	recPath, recEpoch, err := readRecord(opts.Record)
	if err != nil {
		return nil, none, "", err
	}
	cur, have, err := readLedgerFile(path)
	if err != nil {
		return nil, none, "", err
	}
	var why []string
	var retire []map[[32]byte]uint64 // entries of a rolled-back ledger
	epoch := max(recEpoch, cur.epoch)
	if recPath == path {
		switch {
		case !have:
			why = append(why, fmt.Sprintf("lost: the file is missing, but %s records it at epoch %d (deleted? a state directory on tmpfs, a reinstall?)", opts.Record, recEpoch))
		case cur.epoch < recEpoch:
			why = append(why, fmt.Sprintf("rolled back: the file is at epoch %d, %s records epoch %d (a restored backup or snapshot?)", cur.epoch, opts.Record, recEpoch))
			retire = append(retire, cur.m)
		}
	}
	var carry *ledgerData
	if recPath != "" && recPath != path && (from == nil || recPath != from.path) {
		prev, ok, err := readLedgerFile(recPath)
		if err != nil {
			return nil, none, "", fmt.Errorf("nonce ledger %s: previous ledger: %w", path, err)
		}
		epoch = max(epoch, prev.epoch)
		switch {
		case !ok:
			why = append(why, fmt.Sprintf("the previous ledger %s, recorded in %s at epoch %d, is missing: the numbers its keys used cannot be carried over", recPath, opts.Record, recEpoch))
		case have && prev.key != cur.key:
			why = append(why, fmt.Sprintf("the previous ledger %s has another ledger key: its entries cannot be carried over", recPath))
		default:
			if prev.epoch < recEpoch {
				why = append(why, fmt.Sprintf("the previous ledger %s was rolled back: it is at epoch %d, %s records epoch %d", recPath, prev.epoch, opts.Record, recEpoch))
				retire = append(retire, prev.m)
			}
			carry = &prev
		}
	}
	d := cur
	switch {
	case have:
	case from != nil:
		d.key = from.key
	case carry != nil:
		d.key = carry.key
	default:
		if _, err := crand.Read(d.key[:]); err != nil {
			return nil, none, "", fmt.Errorf("nonce ledger %s: %w", path, err)
		}
	}
	if from != nil && (d.key != from.key || carry != nil && carry.key != from.key) {
		return nil, none, "", fmt.Errorf("nonce ledger %s: the file (or the previous ledger its record names) has another ledger key than the running ledger: remove it or choose another path", path)
	}
	if d.m == nil {
		d.m = map[[32]byte]uint64{}
	}
	for _, c := range []*ledgerData{carry, {m: fromEntries(from)}} {
		if c != nil {
			for id, v := range c.m {
				d.m[id] = max(d.m[id], v)
			}
		}
	}
	incident := strings.Join(why, "; ")
	if incident != "" {
		switch opts.Policy {
		case NoncePolicyFreshKeyOnly:
			for _, m := range retire {
				for id := range m {
					d.m[id] = nonceUnbounded
				}
			}
		case NoncePolicyTrust:
		default:
			return nil, none, "", fmt.Errorf("nonce ledger %s: %w: %s; the sequence numbers (nonces) its AEAD keys used are unknown, so none is started: re-key every AEAD SA, then open it with policy %s",
				path, ErrLedgerUnsafe, incident, NoncePolicyFreshKeyOnly)
		}
	}
	d.epoch = epoch + 1
	if err := f.write(d); err != nil {
		return nil, none, "", err
	}
	return f, d, incident, nil
}

func fromEntries(from *moving) map[[32]byte]uint64 {
	if from == nil {
		return nil
	}
	return from.m
}

// readLedgerFile reads and parses the ledger file at path; ok is false
// when it does not exist.
func readLedgerFile(path string) (d ledgerData, ok bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return d, false, nil
	}
	if err != nil {
		return d, false, fmt.Errorf("nonce ledger: %w", err)
	}
	d, err = parseLedger(path, data)
	return d, err == nil, err
}

// readRecord returns the ledger file and epoch in the record at path, or
// "" when there is no record.
func readRecord(path string) (ledger string, epoch uint64, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("nonce ledger record: %w", err)
	}
	return parseRecord(path, data)
}

// parseRecord parses a ledger record; errors name path and line.
func parseRecord(path string, data []byte) (ledger string, epoch uint64, err error) {
	bad := func(line int, what string) error {
		return fmt.Errorf("nonce ledger record %s: line %d: %w: %s", path, line, ErrLedgerCorrupt, what)
	}
	first, rest, ok := strings.Cut(string(data), "\n")
	if !ok {
		return "", 0, bad(1, "no newline (truncated?)")
	}
	f := strings.SplitN(first, " ", 4)
	if len(f) != 4 || f[0]+" "+f[1] != recordMagic || !filepath.IsAbs(f[3]) {
		return "", 0, bad(1, fmt.Sprintf("want %q, an epoch and an absolute path", recordMagic))
	}
	if epoch, err = strconv.ParseUint(f[2], 10, 64); err != nil {
		return "", 0, bad(1, "epoch: "+err.Error())
	}
	if want := fmt.Sprintf("end %08x\n", crc32.ChecksumIEEE([]byte(first+"\n"))); rest != want {
		return "", 0, bad(2, "want the end line with the checksum of line 1 (truncated?)")
	}
	return f[3], epoch, nil
}

// read returns the content of the file, which must carry key, at an
// epoch no older than epoch (the last one this process wrote).
func (f *ledgerFile) read(key [32]byte, epoch uint64) (ledgerData, error) {
	data, err := os.ReadFile(f.path)
	if err != nil {
		return ledgerData{}, fmt.Errorf("nonce ledger: %w", err)
	}
	d, err := parseLedger(f.path, data)
	if err != nil {
		return d, err
	}
	if d.key != key {
		return d, fmt.Errorf("nonce ledger %s: line 1: %w: ledger key changed since it was opened (file replaced?)", f.path, ErrLedgerCorrupt)
	}
	if d.epoch < epoch {
		return d, fmt.Errorf("nonce ledger %s: line 1: %w: rolled back while open: epoch %d, this process wrote epoch %d (file replaced?)", f.path, ErrLedgerUnsafe, d.epoch, epoch)
	}
	return d, nil
}

// parseLedger parses a ledger file; errors name path and line.
func parseLedger(path string, data []byte) (d ledgerData, err error) {
	bad := func(line int, format string, args ...any) error {
		return fmt.Errorf("nonce ledger %s: line %d: %w: %s", path, line, ErrLedgerCorrupt, fmt.Sprintf(format, args...))
	}
	m := map[[32]byte]uint64{}
	if len(data) == 0 {
		return d, bad(1, "empty file (truncated?)")
	}
	off, line, ended := 0, 0, false
	for off < len(data) {
		line++
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			return d, bad(line, "no newline at end of file (truncated?)")
		}
		text := string(data[off : off+i])
		start := off
		off += i + 1
		if ended {
			return d, bad(line, "data after the end line")
		}
		f := strings.Fields(text)
		switch {
		case line == 1:
			h, ok := strings.CutPrefix(text, ledgerMagic+" ")
			if ok {
				k, e, found := strings.Cut(h, " ")
				if !found {
					return d, bad(line, "no epoch after the ledger key")
				}
				if d.epoch, err = strconv.ParseUint(e, 10, 64); err != nil {
					return d, bad(line, "epoch: %v", err)
				}
				h = k
			} else if h, ok = strings.CutPrefix(text, ledgerMagicV1+" "); !ok {
				return d, bad(line, "want header %q followed by the ledger key and the epoch", ledgerMagic)
			}
			if err := decodeID(h, &d.key); err != nil {
				return d, bad(line, "ledger key: %v", err)
			}
		case len(f) == 3 && f[0] == "end":
			n, err := strconv.Atoi(f[1])
			if err != nil || n != len(m) {
				return d, bad(line, "end line counts %q entries, file has %d (truncated?)", f[1], len(m))
			}
			if want := fmt.Sprintf("%08x", crc32.ChecksumIEEE(data[:start])); f[2] != want {
				return d, bad(line, "checksum %s, want %s", f[2], want)
			}
			ended = true
		case len(f) == 2:
			var id [32]byte
			if err := decodeID(f[0], &id); err != nil {
				return d, bad(line, "key id: %v", err)
			}
			v, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				return d, bad(line, "reserved number: %v", err)
			}
			if _, dup := m[id]; dup {
				return d, bad(line, "duplicate key id")
			}
			m[id] = v
		default:
			return d, bad(line, "want \"<key id> <number>\" or the end line, got %d fields", len(f))
		}
	}
	if !ended {
		return d, bad(line, "no end line (truncated?)")
	}
	d.m = m
	return d, nil
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

// write replaces the file with d, durably, then the record with d's epoch.
func (f *ledgerFile) write(d ledgerData) error {
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	fmt.Fprintf(w, "%s %x %d\n", ledgerMagic, d.key[:], d.epoch)
	ids := make([][32]byte, 0, len(d.m))
	for id := range d.m {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b [32]byte) int { return bytes.Compare(a[:], b[:]) })
	for _, id := range ids {
		fmt.Fprintf(w, "%x %d\n", id[:], d.m[id])
	}
	_ = w.Flush()
	fmt.Fprintf(&b, "end %d %08x\n", len(ids), crc32.ChecksumIEEE(b.Bytes()))
	if err := replaceFile(f.path, b.Bytes()); err != nil {
		return fmt.Errorf("nonce ledger %s: write: %w", f.path, err)
	}
	if f.record == "" {
		return nil
	}
	if err := replaceFile(f.record, formatRecord(f.path, d.epoch)); err != nil {
		return fmt.Errorf("nonce ledger record %s: write: %w", f.record, err)
	}
	return nil
}

// formatRecord is the record naming ledger at epoch.
func formatRecord(ledger string, epoch uint64) []byte {
	rec := fmt.Appendf(nil, "%s %d %s\n", recordMagic, epoch, ledger)
	return fmt.Appendf(rec, "end %08x\n", crc32.ChecksumIEEE(rec))
}

// replaceFile replaces the file at path with data (0600): temporary file,
// fsync, rename, fsync of the directory.
func replaceFile(path string, data []byte) error {
	tmp := path + ".tmp"
	t, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = t.Write(data)
	if err == nil {
		err = t.Sync()
	}
	if cerr := t.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	err = d.Sync()
	_ = d.Close()
	return err
}

// lock takes the exclusive lock of the file's read-modify-write.
func (f *ledgerFile) lock() (unlock func(), err error) { return lockPath(f.path + ".lock") }

// lockPath takes an exclusive flock on the file at path (created 0600).
func lockPath(path string) (unlock func(), err error) {
	lf, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("nonce ledger: %w", err)
	}
	if err := flockExclusive(lf); err != nil {
		_ = lf.Close()
		return nil, fmt.Errorf("nonce ledger: lock %s: %w", path, err)
	}
	return func() {
		_ = flockUnlock(lf)
		_ = lf.Close()
	}, nil
}
