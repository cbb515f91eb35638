package espcap

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"
)

// progressDelay: runs shorter than this show no progress bar.
const progressDelay = 500 * time.Millisecond

// NewCommand returns the "esp" command with its "encrypt" and "decrypt"
// subcommands:
//
//	esp encrypt -f ipsec.conf -i in.pcap -o out.pcap
//	esp decrypt -f ipsec.conf -i in.pcap -o out.pcap
//
// Each reads in.pcap (pcap or pcapng), applies the SPD and SAD of the
// setkey file and writes out.pcap atomically in the input's format, then
// prints per-SA counters and drop reasons to the command's output. It
// fails (exits non-zero) when the input is truncated, after writing every
// packet read, and when packets were dropped as errors (bad ICV, replay,
// policy), unless --allow-drops. A progress bar goes to stderr when it is
// a terminal; the crypto framework's log only with -v. The command is
// self-contained (it creates its own crypto framework with the aesni
// provider) and safe to mount under any parent.
func NewCommand() *cobra.Command {
	root := &cobra.Command{
		Use:          "esp",
		SilenceUsage: true, // a failed run is not a usage error
		Short:        "Encrypt or decrypt a pcap file offline with a setkey configuration",
		Long: "esp runs every packet of a pcap file through Keel's ESP engine configured from a\n" +
			"setkey(8) file: encrypt applies the outbound policies and SAs, decrypt verifies\n" +
			"and removes ESP (and ESP-in-UDP). It prints per-SA counters and drop reasons.",
	}
	var cfg, in, out string
	var allowDrops, verbose bool
	root.PersistentFlags().StringVarP(&cfg, "config", "f", "", "setkey configuration file (required)")
	root.PersistentFlags().StringVarP(&in, "input", "i", "", "input pcap or pcapng file (required)")
	root.PersistentFlags().StringVarP(&out, "output", "o", "", "output file, written atomically in the input's format (required)")
	root.PersistentFlags().BoolVar(&allowDrops, "allow-drops", false, "exit 0 even if packets were dropped for bad ICV, replay, policy...")
	root.PersistentFlags().BoolVarP(&verbose, "verbose", "v", false, "log the crypto framework's events (provider admission) to stderr")
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
				o := Options{Direction: d, Config: cfg, In: in, Out: out, AllowDrops: allowDrops,
					Progress: TerminalProgress(cmd.ErrOrStderr()), ProgressDelay: progressDelay}
				if verbose {
					o.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
				}
				res, err := Run(cmd.Context(), o)
				if res != nil {
					WriteReport(cmd.OutOrStdout(), res)
				}
				var de *DropsError
				if errors.As(err, &de) {
					return fmt.Errorf("%w; --allow-drops accepts them", err)
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
