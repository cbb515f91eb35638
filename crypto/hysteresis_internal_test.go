package crypto

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestDefaultHysteresisMargin: with the default options, a binding stays
// on its provider when a newcomer is less than 10% faster and moves when
// it is more than 10% faster, while a new binding always takes the
// fastest. Registration goes through Register (admission, snapshot,
// migration); only the calibration figures are fixed, since measured
// figures on a shared machine cannot sit reliably 5% apart.
func TestDefaultHysteresisMargin(t *testing.T) {
	alg := Algorithm{Cipher: CipherNull, Auth: AuthHMACSHA1_96}
	for _, tc := range []struct {
		name       string
		hysteresis float64
		speedup    float64 // newcomer's throughput relative to the current provider
		stays      bool
	}{
		{"default, 5% faster stays", 0, 1.05, true},
		{"default, 9% faster stays", 0, 1.09, true},
		{"default, 11% faster moves", 0, 1.11, false},
		{"default, 15% faster moves", 0, 1.15, false},
		{"no margin, 5% faster moves", -1, 1.05, false},
		{"30% margin, 15% faster stays", 0.30, 1.15, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := New(Options{SkipSelfTests: true, Hysteresis: tc.hysteresis, Logger: discard()})
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				f.Close(ctx)
			})
			speed := map[string]float64{"cur": 100e6, "new": 100e6 * tc.speedup}
			f.measure = func(_ context.Context, p Provider, caps []Capability) (map[Algorithm][len(CalibrationSizes)]float64, string, error) {
				s, ok := speed[p.Info().Name]
				if !ok {
					return nil, "", fmt.Errorf("no figure for %q", p.Info().Name)
				}
				out := map[Algorithm][len(CalibrationSizes)]float64{}
				for _, c := range caps {
					out[c.Alg] = [len(CalibrationSizes)]float64{s, s, s}
				}
				return out, "", nil
			}
			if err := f.Register(context.Background(), syncProv{"cur"}); err != nil {
				t.Fatal(err)
			}
			b, err := f.Bind(SessionParams{Alg: alg, AuthKey: make([]byte, 20)}, func([]*Request) {})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close(context.Background())
			if err := f.Register(context.Background(), syncProv{"new"}); err != nil {
				t.Fatal(err)
			}
			want := "new"
			if tc.stays {
				want = "cur"
			}
			if got := b.Provider(); got != want {
				t.Errorf("margin %v (effective %v), newcomer %.0f%% faster: binding on %q, want %q",
					tc.hysteresis, f.Options().Hysteresis, (tc.speedup-1)*100, got, want)
			}
			// A new binding takes the fastest whatever the margin.
			b2, err := f.Bind(SessionParams{Alg: alg, AuthKey: make([]byte, 20)}, func([]*Request) {})
			if err != nil {
				t.Fatal(err)
			}
			defer b2.Close(context.Background())
			if got := b2.Provider(); got != "new" {
				t.Errorf("new binding on %q, want the fastest, new", got)
			}
		})
	}
}

// prioProv is syncProv with a static priority.
type prioProv struct {
	syncProv
	priority int
}

func (p prioProv) Info() ProviderInfo {
	return ProviderInfo{Name: p.name, Kind: KindSoftware, Priority: p.priority}
}

// TestTieMargin: for a new binding, measured throughputs within 2% of each
// other are a tie that the static priority breaks; beyond it the faster
// provider wins whatever its priority. Fixed calibration figures, as in
// TestDefaultHysteresisMargin.
func TestTieMargin(t *testing.T) {
	alg := Algorithm{Cipher: CipherNull, Auth: AuthHMACSHA1_96}
	for _, tc := range []struct {
		name    string
		speedup float64 // "fast"'s throughput relative to "prio"'s
		want    string
	}{
		{"1% faster is a tie: priority wins", 1.01, "prio"},
		{"3% faster wins over priority", 1.03, "fast"},
		{"1% slower is a tie: priority wins", 0.99, "prio"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := New(Options{SkipSelfTests: true, Logger: discard()})
			t.Cleanup(func() { f.Close(context.Background()) })
			speed := map[string]float64{"prio": 100e6, "fast": 100e6 * tc.speedup}
			f.measure = func(_ context.Context, p Provider, caps []Capability) (map[Algorithm][len(CalibrationSizes)]float64, string, error) {
				s := speed[p.Info().Name]
				out := map[Algorithm][len(CalibrationSizes)]float64{}
				for _, c := range caps {
					out[c.Alg] = [len(CalibrationSizes)]float64{s, s, s}
				}
				return out, "", nil
			}
			for _, p := range []Provider{prioProv{syncProv{"prio"}, 10}, prioProv{syncProv{"fast"}, 0}} {
				if err := f.Register(context.Background(), p); err != nil {
					t.Fatal(err)
				}
			}
			if got := f.Best(alg); got != tc.want {
				t.Errorf("best %q, want %q", got, tc.want)
			}
		})
	}
}
