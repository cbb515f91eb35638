//go:build gaptrace

package crypto_test

import (
	"context"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
	"github.com/keelinit/keel/crypto/internal/cpuprov"
)

func BenchmarkMigrate1000(b *testing.B) {
	const n = 1000
	crypto.SetMigrateSlice(time.Hour)
	fw := newFW(b, crypto.Options{Hysteresis: 1e9, SkipSelfTests: true, CalibrationBudget: time.Microsecond})
	newB := func(name string) crypto.Provider {
		return cpuprov.New(crypto.ProviderInfo{Name: name, Kind: crypto.KindAccelerated, Priority: aesni.Priority}, stdPrims)
	}
	mustRegister(b, fw, newB("a"))
	for i := range n {
		if _, err := fw.Bind(testKeys(algGCM128, byte(i)), func(rs []*crypto.Request) {}); err != nil {
			b.Fatal(err)
		}
	}
	mustRegister(b, fw, newB("b"))
	cur, other := "a", "b"
	var mig time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if err := fw.Deregister(context.Background(), cur); err != nil {
			b.Fatal(err)
		}
		mig += time.Since(t0)
		b.StopTimer()
		mustRegister(b, fw, newB(cur))
		cur, other = other, cur
		b.StartTimer()
	}
	b.ReportMetric(float64(mig.Nanoseconds())/float64(b.N)/n, "ns/binding")
}
