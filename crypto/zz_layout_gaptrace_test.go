//go:build gaptrace

package crypto

import (
	"fmt"
	"testing"
	"unsafe"
)

func TestLayout(t *testing.T) {
	var f Framework
	var e provEntry
	fmt.Println("fw: closed", unsafe.Offsetof(f.closed), "snap", unsafe.Offsetof(f.snap), "shards", unsafe.Offsetof(f.shards), "rings", unsafe.Offsetof(f.rings), "nextID", unsafe.Offsetof(f.nextID), "clock", unsafe.Offsetof(f.clock), "epoch", unsafe.Offsetof(f.epoch))
	fmt.Println("pe: info", unsafe.Offsetof(e.info), "capSet", unsafe.Offsetof(e.capSet), "tput", unsafe.Offsetof(e.tput), "state", unsafe.Offsetof(e.state), "sessions", unsafe.Offsetof(e.sessions), "rebindsIn", unsafe.Offsetof(e.rebindsIn), "size", unsafe.Sizeof(e))
}
