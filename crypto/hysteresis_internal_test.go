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
