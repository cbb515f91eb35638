//go:build gaptrace

package crypto

func SetMigrateBatch(n int) { migrateBatch = n }
