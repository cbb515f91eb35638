//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package ipsec

import (
	"os"
	"sync"
)

// Without flock(2), writers are serialised within the process only: one
// ledger file must then not be shared by several processes.
var flockMu sync.Mutex

func flockExclusive(*os.File) error { flockMu.Lock(); return nil }

func flockUnlock(*os.File) error { flockMu.Unlock(); return nil }
