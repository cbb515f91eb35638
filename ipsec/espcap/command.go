package espcap

import (
	"github.com/spf13/cobra"
)

// NewCommand returns the "esp" command with its "encrypt" and "decrypt"
// subcommands:
//
//	esp encrypt -f ipsec.conf -i in.pcap -o out.pcap
//	esp decrypt -f ipsec.conf -i in.pcap -o out.pcap
//
// Each reads in.pcap, applies the SPD and SAD of the setkey file and writes
// out.pcap, then prints per-SA counters and drop reasons to the command's
// output. The command is self-contained (it creates its own crypto
// framework with the aesni provider) and safe to mount under any parent.
func NewCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "esp",
		Short: "Encrypt or decrypt a pcap file offline with a setkey configuration",
		Long: "esp runs every packet of a pcap file through Keel's ESP engine configured from a\n" +
			"setkey(8) file: encrypt applies the outbound policies and SAs, decrypt verifies\n" +
			"and removes ESP (and ESP-in-UDP). It prints per-SA counters and drop reasons.",
	}
	var cfg, in, out string
	root.PersistentFlags().StringVarP(&cfg, "config", "f", "", "setkey configuration file (required)")
	root.PersistentFlags().StringVarP(&in, "input", "i", "", "input pcap file (required)")
	root.PersistentFlags().StringVarP(&out, "output", "o", "", "output pcap file (required)")
	for _, d := range []Direction{Encrypt, Decrypt} {
		d := d
		c := &cobra.Command{
			Use:   d.String() + " -f ipsec.conf -i in.pcap -o out.pcap",
			Short: map[Direction]string{Encrypt: "Apply outbound policies: plaintext in, ESP out", Decrypt: "Verify and remove ESP: ESP in, plaintext out"}[d],
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				for _, f := range []struct{ name, v string }{{"config", cfg}, {"input", in}, {"output", out}} {
					if f.v == "" {
						return &missingFlagError{f.name}
					}
				}
				res, err := Run(cmd.Context(), Options{Direction: d, Config: cfg, In: in, Out: out})
				if res != nil {
					WriteReport(cmd.OutOrStdout(), res)
				}
				return err
			},
		}
		root.AddCommand(c)
	}
	return root
}

type missingFlagError struct{ name string }

func (e *missingFlagError) Error() string { return "missing required flag --" + e.name }
