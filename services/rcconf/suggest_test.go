package rcconf

import (
	"math/rand/v2"
	"testing"
)

func TestSuggest(t *testing.T) {
	known := []string{"pktgen_enable", "pktgen_rate", "start_timeout", "stop_timeout", "ipsec_file", "syslogd_enable"}
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"pktgen_enabel", "pktgen_enable", true}, // transposition
		{"start_timout", "start_timeout", true},  // deletion
		{"ipsec_fil", "ipsec_file", true},
		{"sylogd_enable", "syslogd_enable", true},
		{"pktgen_enable", "", false}, // itself is no suggestion
		{"frobnicate", "", false},
		{"ab", "", false}, // too short for any edit to be a likely typo
	}
	for _, tt := range tests {
		got, ok := Suggest(tt.in, known)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Suggest(%q) = %q %v, want %q %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// TestEditDistanceModel compares editDistance with a plain recursive
// definition of the optimal string alignment distance on random short
// strings.
func TestEditDistanceModel(t *testing.T) {
	seed := uint64(rand.Int64())
	r := rand.New(rand.NewPCG(seed, 0))
	var model func(a, b string) int
	model = func(a, b string) int {
		if a == "" {
			return len(b)
		}
		if b == "" {
			return len(a)
		}
		cost := 1
		if a[len(a)-1] == b[len(b)-1] {
			cost = 0
		}
		d := min(model(a[:len(a)-1], b)+1, model(a, b[:len(b)-1])+1, model(a[:len(a)-1], b[:len(b)-1])+cost)
		if len(a) > 1 && len(b) > 1 && a[len(a)-1] == b[len(b)-2] && a[len(a)-2] == b[len(b)-1] {
			d = min(d, model(a[:len(a)-2], b[:len(b)-2])+1)
		}
		return d
	}
	str := func() string {
		b := make([]byte, r.IntN(6))
		for i := range b {
			b[i] = "abc"[r.IntN(3)]
		}
		return string(b)
	}
	for range 2000 {
		a, b := str(), str()
		if got, want := editDistance(a, b), model(a, b); got != want {
			t.Fatalf("seed %d: editDistance(%q, %q) = %d, model %d", seed, a, b, got, want)
		}
	}
}
