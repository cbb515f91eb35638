// Package testenv is what a test does when its environment lacks something
// it needs (a Debian tool, root, /dev/net/tun): skip on a developer's
// machine, fail under CI. CI (.ci/run) installs every tool the tests use, so
// a missing one there is a broken CI setup that must show as a failure, not
// as a silently skipped test.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// CI reports whether the tests run under CI: the environment variable CI is
// "true" (as GitHub Actions, GitLab CI and .ci/run set it).
func CI() bool { return os.Getenv("CI") == "true" }

// Missing ends t because its environment lacks something: t.Fatalf under
// CI, t.Skipf otherwise. The message says what is missing and, where it
// helps, which Debian package provides it.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if CI() {
		t.Fatalf("%s (CI=true: a missing requirement fails the test)", msg)
	}
	t.Skip(msg)
}

// Tool returns the path of the executable name on PATH; when it is not
// there it ends t through Missing, naming pkg (the Debian package that
// provides name; "" if the same).
func Tool(t testing.TB, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if pkg == "" {
			pkg = name
		}
		Missing(t, "%s not installed (Debian %s)", name, pkg)
	}
	return p
}

// Tools calls Tool for each name, with the Debian package of the tools
// Keel's tests use (see Packages).
func Tools(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range names {
		Tool(t, n, Packages[n])
	}
}

// Packages maps the tools Keel's tests run to the Debian packages that
// provide them; .ci/run installs these packages.
var Packages = map[string]string{
	"ip":      "iproute2",
	"ping":    "iputils-ping",
	"tcpdump": "tcpdump",
	"tshark":  "tshark",
	"ethtool": "ethtool",
	"iperf3":  "iperf3",
	"python3": "python3",
}
