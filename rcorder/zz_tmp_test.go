package rcorder

import (
	"testing"
	"math/rand/v2"
)

func TestTmpBig(t *testing.T) {
	rng := rand.New(rand.NewPCG(99, 100))
	hung := 0
	for i := 0; i < 6000; i++ {
		var scripts []Script
		switch i % 4 {
		case 0: scripts = randomTree(rng, 200, 150, 1.5)
		case 1: scripts = randomTree(rng, 60, 20, 2.5)
		case 2: scripts = randomTree(rng, 12, 5, 2)
		default: scripts = randomTree(rng, 100, 300, 3)
		}
		if freebsdReference(scripts).hung { hung++; continue }
		t.Run("", func(t *testing.T) { checkAgainstReference(t, scripts) })
		if t.Failed() { t.FailNow() }
	}
	t.Logf("hung %d", hung)
}
