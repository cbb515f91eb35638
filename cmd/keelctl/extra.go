package main

import "github.com/spf13/cobra"

// addExtra mounts commands provided by other packages (keelctl esp).
func addExtra(root *cobra.Command) {}
