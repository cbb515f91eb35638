package main

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// readOnly makes dir read-only for keeld -n: a read-only bind mount of
// itself when running as root (root ignores permission bits), else mode
// 0555 on every directory. It is undone at cleanup.
func readOnly(t *testing.T, dir string) {
	t.Helper()
	if os.Geteuid() == 0 {
		if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
			t.Fatalf("bind mount %s: %v", dir, err)
		}
		t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
		if err := syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
			t.Fatalf("remount %s read-only: %v", dir, err)
		}
		if err := os.WriteFile(filepath.Join(dir, "probe"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
			t.Fatalf("%s is not read-only: %v", dir, err)
		}
		return
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o555)
		}
		return err
	})
	t.Cleanup(func() {
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				_ = os.Chmod(p, 0o755)
			}
			return err
		})
	})
}

// listTree returns every path under dir with its mode and size.
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, p+" "+fi.Mode().String()+" "+strings.Repeat("#", int(min(fi.Size(), 64))))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// runCmd runs a binary of binDir and returns stdout, stderr and the exit
// status.
func runCmd(t *testing.T, name string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, name), args...)
	cmd.Dir = t.TempDir() // no ./etc
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET=", "KEEL_STATE_DIR=")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return out.String(), errb.String(), ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errb.String(), 0
}

// TestCheckConfig runs keeld -n and keelctl check --root on appliance
// trees: the default appliance is valid; one with errors in rc.conf, an
// rc.d file, the ordering, ipsec.conf and a builtin's variables lists
// each as "file:line: ..." (errors first, every path under the root) and
// exits 1; warnings alone exit 0. Every run is on a read-only root, with
// a runtime and a state directory that do not exist and must still not
// exist afterwards: -n starts, creates and locks nothing.
func TestCheckConfig(t *testing.T) {
	good := applianceTree(t, mustRead(t, "../../etc/ipsec.conf"))
	warn := applianceTree(t, mustRead(t, "../../etc/ipsec.conf"))
	appendFile(t, filepath.Join(warn, "etc/rc.conf"), "pktgen_enabel=YES\nkld_list=\"cryptosoft glxbs\"\n")
	bad := applianceTree(t, mustRead(t, "../../etc/ipsec.conf")+"add 192.0.2.9 192.0.2.2 esp 0x9 -m tunnel -E aes-gcm-16 0x0a0b0c0d0e0f101112131415161718191a1b1c1d0e0f1011;\n")
	appendFile(t, filepath.Join(bad, "etc/rc.conf"), "syslogd_enable=MAYBE\npktgen_rate=0\npktgen_enabel=YES\ncryptodev_modules=cryptosofd\n")
	appendFile(t, filepath.Join(bad, "etc/rc.d/cleanvar"), "start_timout=5s\n")
	daemon := filepath.Join(bad, "etc/rc.d/DAEMON")
	if err := os.WriteFile(daemon, []byte(strings.Replace(mustRead(t, daemon), "# REQUIRE: NETWORKING syslogd", "# REQUIRE: NETWORKING syslogd sshd", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		root string
		code int
		want []string // in this order
	}{
		{"default appliance", good, 0, []string{good + ": configuration OK"}},
		{"warnings only", warn, 0, []string{
			warn + "/etc/rc.conf:11: pktgen_enabel: unknown variable", "(did you mean pktgen_enable?)",
			warn + "/etc/rc.conf:12: kld_list: glxbs: no such module (did you mean glxsb?)",
			warn + ": configuration OK with 0 errors, 2 warnings"}},
		{"errors", bad, 1, []string{
			bad + "/etc/rc.d/DAEMON:2: rcorder: requirement `sshd' in file `etc/rc.d/DAEMON' has no providers.",
			bad + "/etc/rc.d/cleanvar:9:1: start_timout: invalid rc.d service: unknown key (did you mean start_timeout?)",
			bad + "/etc/rc.conf:14: cryptodev_modules: cryptosofd: no such module (did you mean cryptosoft?)",
			bad + "/etc/ipsec.conf:30:29: SPI: SPI 9 is reserved",
			bad + "/etc/rc.conf:11: WARNING: $syslogd_enable is not set properly",
			bad + "/etc/rc.conf:12: pktgen_rate: want 1..1000000",
			bad + "/etc/rc.conf:13: pktgen_enabel: unknown variable",
			bad + ": configuration INVALID: 6 errors, 1 warning"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			readOnly(t, tt.root)
			before := listTree(t, tt.root)
			gone := filepath.Join(t.TempDir(), "nonexistent")
			for _, argv := range [][]string{
				{"keeld", "-n", "--root", tt.root, "--runtime-dir", filepath.Join(gone, "run"), "--state-dir", filepath.Join(gone, "state")},
				{"keelctl", "check", "--root", tt.root, "--state-dir", filepath.Join(gone, "state")},
			} {
				out, errs, code := runCmd(t, argv[0], argv[1:]...)
				if code != tt.code {
					t.Errorf("%s: exit %d, want %d\n%s%s", argv[0], code, tt.code, out, errs)
				}
				rest := out
				for _, w := range tt.want {
					i := strings.Index(rest, w)
					if i < 0 {
						t.Errorf("%s: output lacks %q (in this order):\n%s", argv[0], w, out)
						break
					}
					rest = rest[i+len(w):]
				}
				if strings.Contains(out+errs, "0a0b0c0d") {
					t.Errorf("%s shows key material:\n%s", argv[0], out)
				}
				for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
					if !strings.HasPrefix(line, tt.root+"/") && !strings.HasPrefix(line, tt.root+": ") {
						t.Errorf("%s: line not located under the root: %q", argv[0], line)
					}
				}
			}
			if _, err := os.Stat(gone); err == nil {
				t.Errorf("-n created %s", gone)
			}
			if after := listTree(t, tt.root); !slices.Equal(before, after) {
				t.Errorf("-n changed the root:\n%v\n%v", before, after)
			}
		})
	}
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func appendFile(t *testing.T, p, s string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}
