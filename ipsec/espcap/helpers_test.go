package espcap

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
)

var (
	fwOnce sync.Once
	fw     *crypto.Framework
	fwErr  error
)

func testFramework(tb testing.TB) *crypto.Framework {
	tb.Helper()
	fwOnce.Do(func() {
		fw = crypto.New(crypto.Options{CalibrationBudget: 5 * time.Millisecond})
		fwErr = fw.Register(context.Background(), aesni.New())
	})
	if fwErr != nil {
		tb.Fatal(fwErr)
	}
	return fw
}
