package espcap

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/keelinit/keel/internal/testenv"
)

// readCapture returns the link type of every interface of a pcap or
// pcapng file, and its records' IP packets (Ethernet padding removed)
// with the interface index of each.
func readCapture(t *testing.T, path string) (Format, []layers.LinkType, [][]byte, []int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd, err := newCaptureReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var ips [][]byte
	var intf []int
	for {
		d, ci, lt, err := rd.read()
		if err != nil {
			break
		}
		li, err := linkFor(lt)
		if err != nil {
			t.Fatal(err)
		}
		ip := d[li.ipOffset(d):]
		if len(ip) >= 4 && ip[0]>>4 == 4 {
			ip = ip[:int(ip[2])<<8|int(ip[3])]
		}
		ips = append(ips, append([]byte(nil), ip...))
		intf = append(intf, ci.InterfaceIndex)
	}
	var lts []layers.LinkType
	if rd.pcap != nil {
		lts = []layers.LinkType{rd.pcap.LinkType()}
	}
	for _, i := range rd.interfaces() {
		lts = append(lts, i.LinkType)
	}
	return rd.format, lts, ips, intf
}

// writeRawIP writes the IP packets of the Ethernet capture src to a
// LINKTYPE_RAW pcap (no link header), a second link type for pcapng.
func writeRawIP(t *testing.T, src, dst string) {
	t.Helper()
	_, _, ips, _ := readCapture(t, src)
	f, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(65535, layers.LinkTypeRaw); err != nil {
		t.Fatal(err)
	}
	for _, ip := range ips {
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(1700000100, 0), CaptureLength: len(ip), Length: len(ip)}
		if err := w.WritePacket(ci, ip); err != nil {
			t.Fatal(err)
		}
	}
}

// tsharkESP returns, for each ESP packet of path as tshark reads it, the
// interface id and whether tshark verified its ICV with the SA of c.
func tsharkESP(t *testing.T, tshark, dir, path string, c interopCase) []string {
	t.Helper()
	akey := ""
	if c.akey != "" {
		akey = "0x" + c.akey
	}
	uat := `uat:esp_sa:"IPv4","` + gwA.String() + `","` + gwB.String() + `","0x00001001","` + c.tsharkEnc + `","0x` + c.ckey + `","` + c.tsharkAuth + `","` + akey + `"`
	cmd := exec.Command(tshark, "-n", "-r", path, "-o", "esp.enable_encryption_decode:TRUE",
		"-o", "esp.enable_authentication_check:TRUE", "-o", uat, "-Y", "esp",
		"-T", "fields", "-e", "frame.interface_id", "-e", "esp.icv_good")
	cmd.Env = append(os.Environ(), "HOME="+dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("tshark -r %s: %v\n%s", path, err, stderr.String())
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		if l != "" {
			out = append(out, strings.Join(strings.Fields(l), " "))
		}
	}
	return out
}

// TestPcapng: pcapng files written by Wireshark's own tools (editcap
// converting a pcap, mergecap joining an Ethernet and a raw-IP capture
// into one file with two interfaces) are read; the output is pcapng with
// the same interfaces, and tshark verifies every ICV in it and sees each
// packet on its original interface; likewise for scapy's wrpcapng. Decrypting Keel's pcapng gives back
// the plaintext.
func TestPcapng(t *testing.T) {
	editcap := testenv.Tool(t, "editcap", "wireshark-common")
	mergecap := testenv.Tool(t, "mergecap", "wireshark-common")
	tshark := testenv.Tool(t, "tshark", "tshark")
	c := interopCases[3] // aes-gcm-udp4500-tunnel
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain.pcap")
	writePlain(t, plain, hostA, hostB)
	raw := filepath.Join(dir, "raw.pcap")
	writeRawIP(t, plain, raw)
	_, _, want, _ := readCapture(t, plain)

	one := filepath.Join(dir, "one.pcapng")
	if out, err := exec.Command(editcap, "-F", "pcapng", plain, one).CombinedOutput(); err != nil {
		t.Fatalf("editcap: %v\n%s", err, out)
	}
	two := filepath.Join(dir, "two.pcapng")
	// -a: concatenate (Ethernet records, then the raw ones).
	if out, err := exec.Command(mergecap, "-a", "-F", "pcapng", "-w", two, plain, raw).CombinedOutput(); err != nil {
		t.Fatalf("mergecap: %v\n%s", err, out)
	}
	// scapy's own pcapng writer (wrpcapng), a third implementation.
	sc := filepath.Join(dir, "scapy.pcapng")
	scapyErr := exec.Command(python, "-c", "import sys; from scapy.utils import rdpcap, wrpcapng; wrpcapng(sys.argv[2], rdpcap(sys.argv[1]))", plain, sc).Run()
	for _, tc := range []struct {
		name  string
		in    string
		links []layers.LinkType
		err   error // the tool failed to produce in
	}{
		{"editcap", one, []layers.LinkType{layers.LinkTypeEthernet}, nil},
		{"mergecap-two-interfaces", two, []layers.LinkType{layers.LinkTypeEthernet, layers.LinkTypeRaw}, nil},
		{"scapy-wrpcapng", sc, []layers.LinkType{layers.LinkTypeEthernet}, scapyErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err != nil {
				testenv.Missing(t, "%s could not write the pcapng (Debian python3-scapy): %v", python, tc.err)
			}
			if f, lts, _, _ := readCapture(t, tc.in); f != FormatPcapng || !equalLinks(lts, tc.links) {
				t.Fatalf("test input %s: %v %v", tc.in, f, lts)
			}
			enc := filepath.Join(dir, tc.name+"-enc.pcapng")
			res := runFile(t, dir, Encrypt, c.config("out"), tc.in, enc)
			n := len(want) * len(tc.links)
			if res.Format != FormatPcapng || res.Forwarded != n || res.Dropped != 0 {
				t.Fatalf("encrypt: %+v", res)
			}
			f, lts, _, intf := readCapture(t, enc)
			if f != FormatPcapng || !equalLinks(lts, tc.links) {
				t.Fatalf("output: %v with link types %v, want pcapng with %v", f, lts, tc.links)
			}
			lines := tsharkESP(t, tshark, dir, enc, c)
			if len(lines) != n {
				t.Fatalf("tshark saw %d ESP packets in Keel's pcapng, want %d:\n%s", len(lines), n, strings.Join(lines, "\n"))
			}
			for i, l := range lines {
				if want := []string{"0 1", "1 1"}[intf[i]]; l != want && l != strings.Replace(want, " 1", " True", 1) {
					t.Errorf("tshark packet %d: %q, want interface %d with a good ICV", i, l, intf[i])
				}
				if wantIntf := i / len(want); intf[i] != wantIntf {
					t.Errorf("packet %d on interface %d, want %d", i, intf[i], wantIntf)
				}
			}
			dec := filepath.Join(dir, tc.name+"-dec.pcapng")
			runFile(t, dir, Decrypt, c.config("in"), enc, dec)
			_, _, got, _ := readCapture(t, dec)
			if len(got) != n {
				t.Fatalf("decrypted %d packets, want %d", len(got), n)
			}
			for i := range got {
				if !bytes.Equal(got[i], want[i%len(want)]) {
					t.Errorf("packet %d differs after encrypt+decrypt", i)
				}
			}
		})
	}
}

func equalLinks(a, b []layers.LinkType) bool {
	return len(a) == len(b) && string(linkBytes(a)) == string(linkBytes(b))
}

func linkBytes(l []layers.LinkType) []byte {
	out := make([]byte, len(l))
	for i, x := range l {
		out[i] = byte(x)
	}
	return out
}

// TestOutputAtomic: whatever fails (input missing, a directory, not a
// capture, a broken config, a link type the tool cannot handle), an
// existing output keeps its content and no temporary file is left in its
// directory. A successful run replaces it.
func TestOutputAtomic(t *testing.T) {
	dir, plain, conf := encryptSetup(t, interopCases[1], gwA, gwB)
	broken := filepath.Join(dir, "broken.conf")
	os.WriteFile(broken, []byte("add 192.0.2.1 192.0.2.2 esp 0x10 -E aes-gcm-16 0x00;\n"), 0o600)
	notCapture := filepath.Join(dir, "notes.txt")
	os.WriteFile(notCapture, []byte("not a capture at all\n"), 0o600)
	wifi := filepath.Join(dir, "wifi.pcap")
	os.WriteFile(wifi, pcapOf(t, layers.LinkTypeIEEE802_11, []byte{1, 2, 3, 4}), 0o600)
	outDir := filepath.Join(dir, "out")
	os.Mkdir(outDir, 0o755)
	out := filepath.Join(outDir, "result.pcap")
	const old = "the previous result, to be kept"
	for _, tc := range []struct{ name, conf, in string }{
		{"missing input", conf, filepath.Join(dir, "nope.pcap")},
		{"input is a directory", conf, dir},
		{"input not a capture", conf, notCapture},
		{"unsupported link type", conf, wifi},
		{"broken config", broken, plain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(out, []byte(old), 0o640); err != nil {
				t.Fatal(err)
			}
			_, err := Run(context.Background(), Options{Direction: Encrypt, Config: tc.conf, In: tc.in, Out: out, Framework: testFramework(t)})
			if err == nil {
				t.Fatal("run succeeded")
			}
			if b, _ := os.ReadFile(out); string(b) != old {
				t.Errorf("output changed by a failed run (%v): now %d bytes", err, len(b))
			}
			if ents, _ := os.ReadDir(outDir); len(ents) != 1 {
				t.Errorf("output directory holds %d entries, want only the output (temporary file left?)", len(ents))
			}
		})
	}
	if _, err := Run(context.Background(), Options{Direction: Encrypt, Config: conf, In: plain, Out: out, Framework: testFramework(t)}); err != nil {
		t.Fatal(err)
	}
	if _, _, ips, _ := readCapture(t, out); len(ips) != 8 {
		t.Fatalf("successful run: %d packets in the output", len(ips))
	}
	if st, _ := os.Stat(out); st.Mode().Perm() != 0o640 {
		t.Errorf("replaced output has mode %v, want the previous 0640", st.Mode().Perm())
	}
}

// TestTruncatedCapture: a capture cut in the middle of its 7th record (as
// a capture still being written, or copied while it was) writes the 6
// packets read and fails naming the count; for pcap and for pcapng
// (converted by editcap).
func TestTruncatedCapture(t *testing.T) {
	dir, plain, conf := encryptSetup(t, interopCases[1], gwA, gwB)
	inputs := []string{plain}
	if _, err := exec.LookPath("editcap"); err == nil || os.Getenv("CI") == "true" {
		ng := filepath.Join(dir, "plain.pcapng")
		if out, err := exec.Command(testenv.Tool(t, "editcap", "wireshark-common"), "-F", "pcapng", plain, ng).CombinedOutput(); err != nil {
			t.Fatalf("editcap: %v\n%s", err, out)
		}
		inputs = append(inputs, ng)
	}
	for _, in := range inputs {
		t.Run(filepath.Ext(in), func(t *testing.T) {
			data, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			// The offset of the 7th record: read 6 through a counter.
			cut := recordEnd(t, data, 6) + 10
			tr := filepath.Join(dir, "cut"+filepath.Ext(in))
			os.WriteFile(tr, data[:cut], 0o600)
			out := filepath.Join(dir, "cut-out"+filepath.Ext(in))
			res, err := Run(context.Background(), Options{Direction: Encrypt, Config: conf, In: tr, Out: out, Framework: testFramework(t)})
			var te *TruncatedError
			if !errors.As(err, &te) || te.Records != 6 || !strings.Contains(err.Error(), "after 6 records") {
				t.Fatalf("err = %v, want a TruncatedError after 6 records", err)
			}
			if res == nil || res.Written != 6 {
				t.Fatalf("result %+v", res)
			}
			if _, _, ips, _ := readCapture(t, out); len(ips) != 6 {
				t.Fatalf("output holds %d packets, want the 6 read", len(ips))
			}
		})
	}
}

// recordEnd returns the length of the shortest prefix of a capture
// that holds its first n records.
func recordEnd(t *testing.T, data []byte, n int) int {
	t.Helper()
	for end := 0; end <= len(data); end++ {
		r, err := newCaptureReader(bytes.NewReader(data[:end]))
		if err != nil {
			continue
		}
		k := 0
		for {
			if _, _, _, err := r.read(); err != nil {
				break
			}
			k++
		}
		if k == n {
			return end
		}
	}
	t.Fatalf("capture has fewer than %d records", n)
	return 0
}

// TestDropsFailTheRun: packets dropped as errors fail the run after the
// output is written (bad ICV: a wrong key; replay: every packet twice),
// unless AllowDrops; NAT-T keepalives do not.
func TestDropsFailTheRun(t *testing.T) {
	dir := t.TempDir()
	c := interopCases[3] // aes-gcm-udp4500-tunnel: keepalives possible
	plain := filepath.Join(dir, "plain.pcap")
	writePlain(t, plain, hostA, hostB)
	enc := filepath.Join(dir, "enc.pcap")
	runFile(t, dir, Encrypt, c.config("out"), plain, enc)
	inConf := filepath.Join(dir, "in.conf")
	os.WriteFile(inConf, []byte(c.config("in")), 0o600)
	badConf := filepath.Join(dir, "bad.conf")
	os.WriteFile(badConf, []byte(strings.Replace(c.config("in"), keyGCM[:8], "00000000", 1)), 0o600)
	twice := filepath.Join(dir, "twice.pcap")
	duplicate(t, enc, twice)

	for _, tc := range []struct {
		name, conf, in string
		written        int
		drops          map[string]int
	}{
		{"bad-icv", badConf, enc, 0, map[string]int{"bad-icv": 8}},
		{"replay", inConf, twice, 8, map[string]int{"replay": 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(dir, tc.name+".pcap")
			res, err := Run(context.Background(), Options{Direction: Decrypt, Config: tc.conf, In: tc.in, Out: out, Framework: testFramework(t)})
			var de *DropsError
			if !errors.As(err, &de) || len(de.Drops) != len(tc.drops) {
				t.Fatalf("err = %v, want drops %v", err, tc.drops)
			}
			for k, n := range tc.drops {
				if de.Drops[k] != n {
					t.Errorf("drops %v, want %v", de.Drops, tc.drops)
				}
			}
			if _, _, ips, _ := readCapture(t, out); len(ips) != tc.written || res.Written != tc.written {
				t.Errorf("output holds %d packets (result %d), want %d", len(ips), res.Written, tc.written)
			}
			if _, err := Run(context.Background(), Options{Direction: Decrypt, Config: tc.conf, In: tc.in, Out: out, AllowDrops: true, Framework: testFramework(t)}); err != nil {
				t.Errorf("AllowDrops: %v", err)
			}
		})
	}
	res := &Result{Drops: map[string]int{"nat-keepalive": 3, "dummy": 1}}
	if de := res.ErrorDrops(); de != nil {
		t.Errorf("keepalives and dummies counted as errors: %v", de)
	}
}

// duplicate writes every record of src twice, in a row, to dst.
func duplicate(t *testing.T, src, dst string) {
	t.Helper()
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	o, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	w := pcapgo.NewWriter(o)
	w.WriteFileHeader(65535, r.LinkType())
	for {
		d, ci, err := r.ReadPacketData()
		if err != nil {
			break
		}
		w.WritePacket(ci, d)
		w.WritePacket(ci, d)
	}
}

// encryptSetup writes, in a new directory, 8 plaintext packets from src
// to dst (plain.pcap) and the outbound setkey file of c (out.conf).
func encryptSetup(t *testing.T, c interopCase, src, dst netip.Addr) (dir, plain, conf string) {
	t.Helper()
	dir = t.TempDir()
	plain = filepath.Join(dir, "plain.pcap")
	writePlain(t, plain, src, dst)
	conf = filepath.Join(dir, "out.conf")
	if err := os.WriteFile(conf, []byte(c.config("out")), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, plain, conf
}

// TestQuietUnlessVerbose: the command writes nothing to stderr when it is
// not a terminal (no progress bar, no framework log), even through the
// default logger; -v logs the provider's admission to stderr.
func TestQuietUnlessVerbose(t *testing.T) {
	dir, plain, conf := encryptSetup(t, interopCases[1], gwA, gwB)
	var def bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&def, nil)))
	defer slog.SetDefault(prev)
	for _, verbose := range []bool{false, true} {
		args := []string{"encrypt", "-f", conf, "-i", plain, "-o", filepath.Join(dir, "enc.pcap")}
		if verbose {
			args = append(args, "-v")
		}
		cmd := NewCommand()
		var stdout, stderr bytes.Buffer
		cmd.SetOut(&stdout)
		cmd.SetErr(&stderr)
		cmd.SetArgs(args)
		if err := cmd.ExecuteContext(context.Background()); err != nil {
			t.Fatal(err)
		}
		admitted := strings.Contains(stderr.String(), "provider admitted")
		if verbose != admitted || (!verbose && stderr.Len() > 0) {
			t.Errorf("-v %v: stderr %q", verbose, stderr.String())
		}
		if !strings.Contains(stdout.String(), "forwarded 8") {
			t.Errorf("report: %q", stdout.String())
		}
	}
	if def.Len() > 0 {
		t.Errorf("the default logger got: %q", def.String())
	}
}

// TestProgressBar: with a Progress writer the run draws a bar that
// reaches 100% and erases it at the end; without one nothing is drawn.
func TestProgressBar(t *testing.T) {
	dir, plain, conf := encryptSetup(t, interopCases[1], gwA, gwB)
	var bar bytes.Buffer
	if _, err := Run(context.Background(), Options{Direction: Encrypt, Config: conf, In: plain, Out: filepath.Join(dir, "enc.pcap"),
		Framework: testFramework(t), Progress: &bar}); err != nil {
		t.Fatal(err)
	}
	// Without a delay the bar is drawn at once; stop draws the final state
	// (everything read) and erases the line.
	s := bar.String()
	if !strings.HasPrefix(s, "\r[") || !strings.Contains(s, "100%") || !strings.HasSuffix(s, "\r\x1b[K") {
		t.Errorf("progress output %q", s)
	}
	if got := progressLine(100, 100); !strings.Contains(got, "100%") || !strings.Contains(got, strings.Repeat("=", progressWidth)) {
		t.Errorf("full bar %q", got)
	}
	if got := progressLine(1, 4); !strings.Contains(got, " 25%") {
		t.Errorf("quarter bar %q", got)
	}
}

func progressLine(read, total int64) string { return bar(read, total) }
