package main

import (
	"github.com/spf13/cobra"

	"github.com/keelinit/keel/ipsec/espcap"
)

// addExtra mounts commands provided by other packages: keelctl esp
// encrypt|decrypt (offline ESP over pcap files, package ipsec/espcap).
func addExtra(root *cobra.Command) {
	root.AddCommand(espcap.NewCommand())
}
