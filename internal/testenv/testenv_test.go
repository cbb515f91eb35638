package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMissingUnderCI runs a child test that asks for a tool that does not
// exist, with and without CI=true: under CI it must fail, otherwise skip.
func TestMissingUnderCI(t *testing.T) {
	if os.Getenv("KEEL_TESTENV_CHILD") == "1" {
		Tool(t, "keel-no-such-tool", "")
		t.Fatal("Tool returned for a missing tool")
	}
	for _, c := range []struct {
		ci       string
		wantFail bool
		want     string
	}{
		{"true", true, "--- FAIL: TestMissingUnderCI"},
		{"", false, "--- SKIP: TestMissingUnderCI"},
		{"false", false, "--- SKIP: TestMissingUnderCI"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMissingUnderCI$", "-test.v")
		cmd.Env = append(os.Environ(), "KEEL_TESTENV_CHILD=1", "CI="+c.ci)
		out, err := cmd.CombinedOutput()
		if failed := err != nil; failed != c.wantFail || !strings.Contains(string(out), c.want) {
			t.Errorf("CI=%q: err %v, output:\n%s\nwant %q", c.ci, err, out, c.want)
		}
		if !strings.Contains(string(out), "keel-no-such-tool not installed") {
			t.Errorf("CI=%q: message does not name the tool:\n%s", c.ci, out)
		}
	}
}
