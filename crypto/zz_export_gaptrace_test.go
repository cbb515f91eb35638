//go:build gaptrace

package crypto

import "time"

func SetMigrateSlice(d time.Duration) { migrateSlice = d }
