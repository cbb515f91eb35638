// Command keelctl controls a running keeld through its control socket.
//
//	keelctl status              # every service, like systemctl list-units
//	keelctl status ipsec        # one service in detail; exit 0 active, 3 not
//	keelctl crypto              # providers, self-tests, speeds, bindings
//	keelctl ipsec               # gateway interface counters, then the SAs
//	keelctl ipsec sa            # SAs with counters and providers (never keys)
//	keelctl ipsec if            # gateway interfaces: packets, bytes, drops
//	keelctl boot plot > boot.svg
//
// The socket is $KEEL_SOCKET, else the default keeld uses
// (/run/keel/keeld.sock for root). Every command accepts --json.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/keelinit/keel/modules"
	"github.com/keelinit/keel/services"
	"github.com/keelinit/keel/services/api"
	"github.com/keelinit/keel/services/builtin"
)

// exitError carries an exit code (LSB: 3 for "not running").
type exitError struct{ code int }

func (e exitError) Error() string { return "exit " + strconv.Itoa(e.code) }

type app struct {
	socket string
	json   bool
	out    io.Writer
	errOut io.Writer
}

func main() {
	a := &app{out: os.Stdout, errOut: os.Stderr}
	os.Exit(a.run(os.Args[1:]))
}

// run executes the command line args and returns the exit status: the
// code of an exitError, 4 when keeld refused the call, 1 for other errors.
func (a *app) run(args []string) int {
	root := a.root()
	root.SetArgs(args)
	root.SetOut(a.out)
	root.SetErr(a.errOut)
	err := root.Execute()
	var ee exitError
	switch {
	case errors.As(err, &ee):
		return ee.code
	case err != nil:
		fmt.Fprintln(a.errOut, "keelctl:", err)
		if errors.Is(err, api.ErrPermission) {
			return 4 // LSB: insufficient privilege
		}
		return 1
	}
	return 0
}

func (a *app) client() *api.Client { return api.NewClient(a.socket) }

func (a *app) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 2*time.Minute)
}

func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (a *app) root() *cobra.Command {
	root := &cobra.Command{
		Use:           "keelctl",
		Short:         "Control a running keeld",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&a.socket, "socket", services.DefaultSocket(), "keeld control socket ($KEEL_SOCKET)")
	root.PersistentFlags().BoolVar(&a.json, "json", false, "print JSON")
	root.AddCommand(a.statusCmd(), a.actionCmd("start"), a.actionCmd("stop"), a.actionCmd("restart"), a.reloadCmd(),
		a.kldstatCmd(), a.kldloadCmd(), a.kldunloadCmd(), a.cryptoCmd(), a.ipsecCmd(), a.bootCmd(), a.graphCmd(), a.shutdownCmd())
	addExtra(root)
	return root
}

// completeServices offers service names for shell completion.
func (a *app) completeServices(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := a.ctx()
	defer cancel()
	var st []services.Status
	if err := a.client().Get(ctx, "/v1/services", nil, &st); err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	for _, s := range st {
		names = append(names, s.Name)
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

func (a *app) statusCmd() *cobra.Command {
	var lines int
	cmd := &cobra.Command{
		Use:               "status [NAME]",
		Short:             "Show services (exit 0 if NAME is active, 3 if not)",
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: a.completeServices,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := a.ctx()
			defer cancel()
			c := a.client()
			if len(args) == 0 {
				var st []services.Status
				if err := c.Get(ctx, "/v1/services", nil, &st); err != nil {
					return err
				}
				if a.json {
					return a.printJSON(st)
				}
				printTable(a.out, st)
				var info api.BootInfo
				if err := c.Get(ctx, "/v1/boot/status", nil, &info); err == nil {
					if !info.Booted {
						fmt.Fprintln(a.out, "boot in progress")
					}
					if info.Stopping {
						fmt.Fprintln(a.out, "shutting down")
					}
					for _, p := range info.Problems {
						fmt.Fprintln(a.out, "rcorder: "+p)
					}
				}
				return nil
			}
			var d services.Detail
			if err := c.Get(ctx, "/v1/services/"+url.PathEscape(args[0]), url.Values{"lines": {strconv.Itoa(lines)}}, &d); err != nil {
				if errors.Is(err, api.ErrNotFound) {
					fmt.Fprintln(a.errOut, "keelctl:", err)
					return exitError{4} // LSB: unknown service
				}
				return err
			}
			if a.json {
				_ = a.printJSON(d)
			} else {
				printDetail(a.out, d)
			}
			if !d.State.Active() {
				return exitError{3}
			}
			return nil
		},
	}
	cmd.Flags().IntVarP(&lines, "lines", "n", 10, "log lines to show")
	return cmd
}

func since(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return time.Since(t).Round(time.Second).String() + " ago"
}

func dur(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}

func printTable(w io.Writer, st []services.Status) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tTYPE\tSTATE\tPID\tSINCE\tSTART\tREASON")
	counts := map[services.State]int{}
	for _, s := range st {
		pid := "-"
		if s.PID != 0 {
			pid = strconv.Itoa(s.PID)
		}
		reason := s.Reason
		if reason == "" {
			reason = s.StatusText
		}
		if s.Restarts > 0 {
			reason = fmt.Sprintf("%s (restarts: %d)", reason, s.Restarts)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Type, s.State, pid, since(s.Since), dur(s.Duration), truncate(reason, 90))
		counts[s.State]++
	}
	tw.Flush()
	var parts []string
	for _, k := range []services.State{services.StateRunning, services.StateExited, services.StateStarting, services.StateFailed, services.StateBlocked, services.StateDisabled, services.StateStopped} {
		if counts[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[k], k))
		}
	}
	fmt.Fprintf(w, "\n%d services: %s\n", len(st), strings.Join(parts, ", "))
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n-3] + "..."
	}
	return s
}

func printDetail(w io.Writer, d services.Detail) {
	dot := "●"
	fmt.Fprintf(w, "%s %s - %s service (%s)\n", dot, d.Name, d.Type, d.Path)
	active := string(d.State)
	if !d.Since.IsZero() {
		active += " since " + d.Since.Format(time.DateTime) + "; " + since(d.Since)
	}
	fmt.Fprintf(w, "%12s %s\n", "State:", active)
	if d.Reason != "" {
		fmt.Fprintf(w, "%12s %s\n", "Reason:", d.Reason)
	}
	if d.PID != 0 {
		fmt.Fprintf(w, "%12s %d\n", "Main PID:", d.PID)
	}
	if d.StatusText != "" {
		fmt.Fprintf(w, "%12s %q\n", "Status:", d.StatusText)
	}
	if d.Duration > 0 {
		fmt.Fprintf(w, "%12s %s\n", "Started in:", dur(d.Duration))
	}
	if d.Restarts > 0 {
		fmt.Fprintf(w, "%12s %d\n", "Restarts:", d.Restarts)
	}
	if len(d.Command) > 0 {
		fmt.Fprintf(w, "%12s %s\n", "Command:", strings.Join(d.Command, " "))
	}
	if d.Rcvar != "" {
		fmt.Fprintf(w, "%12s %s=%s\n", "Rcvar:", d.Rcvar, d.Settings[d.Rcvar])
	}
	fmt.Fprintf(w, "%12s %s\n", "Provides:", orDash(d.Provides))
	fmt.Fprintf(w, "%12s %s\n", "Requires:", orDash(d.Requires))
	fmt.Fprintf(w, "%12s %s\n", "Required by:", orDash(d.RequiredBy))
	if len(d.Log) > 0 {
		fmt.Fprintln(w)
		for _, l := range d.Log {
			fmt.Fprintln(w, l)
		}
	}
}

func orDash(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, " ")
}

func (a *app) actionCmd(action string) *cobra.Command {
	return &cobra.Command{
		Use:               action + " NAME",
		Short:             strings.ToUpper(action[:1]) + action[1:] + " a service",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeServices,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := a.ctx()
			defer cancel()
			var d services.Detail
			if err := a.client().Post(ctx, "/v1/services/"+url.PathEscape(args[0])+"/"+action, nil, &d); err != nil {
				return err
			}
			if a.json {
				return a.printJSON(d)
			}
			fmt.Fprintf(a.out, "%s: %s\n", d.Name, d.State)
			return nil
		},
	}
}

func (a *app) reloadCmd() *cobra.Command {
	return &cobra.Command{
		Use:               "reload [NAME]",
		Short:             "Re-evaluate rc.conf and restart changed services, or reload one service",
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: a.completeServices,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				return a.actionCmd("reload").RunE(cmd, args)
			}
			ctx, cancel := a.ctx()
			defer cancel()
			var res services.ReloadResult
			if err := a.client().Post(ctx, "/v1/reload", nil, &res); err != nil {
				return err
			}
			if a.json {
				return a.printJSON(res)
			}
			fmt.Fprintf(a.out, "restarted: %s\nstarted:   %s\nstopped:   %s\nunchanged: %d\n",
				orDash(res.Restarted), orDash(res.Started), orDash(res.Stopped), res.Unchanged)
			return nil
		},
	}
}

func (a *app) printModules(st []modules.Stat) error {
	if a.json {
		return a.printJSON(st)
	}
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Id\tRefs\tName\tVersion\tKind\tState\tLoaded\tDepends on")
	for _, s := range st {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%s\t%s\t%s\t%s\n", s.ID, s.Refs, s.Name, s.Version, s.Kind, s.State, since(s.LoadedAt), orDash(s.DependsOn))
	}
	return tw.Flush()
}

func (a *app) kldstatCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "kldstat",
		Short: "List loaded modules",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := a.ctx()
			defer cancel()
			var st []modules.Stat
			if err := a.client().Get(ctx, "/v1/modules", nil, &st); err != nil {
				return err
			}
			return a.printModules(st)
		},
	}
}

func (a *app) kldloadCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "kldload NAME",
		Short: "Load a module",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := a.ctx()
			defer cancel()
			var st []modules.Stat
			if err := a.client().Post(ctx, "/v1/modules/load", builtin.ModuleRequest{Name: args[0]}, &st); err != nil {
				return err
			}
			return a.printModules(st)
		},
	}
}

func (a *app) kldunloadCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "kldunload [-f] NAME",
		Short: "Unload a module (refused while it is in use, unless forced)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := a.ctx()
			defer cancel()
			var st []modules.Stat
			if err := a.client().Post(ctx, "/v1/modules/unload", builtin.ModuleRequest{Name: args[0], Force: force}, &st); err != nil {
				return err
			}
			return a.printModules(st)
		},
	}
	cmd.Flags().BoolVarP(&force, "force", "f", false, "force the unload")
	return cmd
}

func (a *app) cryptoCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "crypto",
		Short: "Show crypto providers, self-tests, measured speeds, bindings and rebinds",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := a.ctx()
			defer cancel()
			var v builtin.Crypto
			if err := a.client().Get(ctx, "/v1/crypto", nil, &v); err != nil {
				return err
			}
			if a.json {
				return a.printJSON(v)
			}
			if !v.Running {
				fmt.Fprintln(a.out, "crypto framework not running")
				return exitError{3}
			}
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PROVIDER\tKIND\tSTATE\tSELF-TEST\tAES-GCM-128@1420\tAES-CBC-128@1420\tSESSIONS\tREBINDS IN/OUT\tFAULTS")
			for _, p := range v.Providers {
				kind := p.Kind
				if p.Emulated {
					kind += " (emulated)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d/%d\t%d\n", p.Name, kind, p.State, p.SelfTest,
					speed(p, "aes-gcm-16-128"), speed(p, "aes-cbc-128+hmac-sha1-96"), p.Sessions, p.RebindsIn, p.RebindsOut, p.Faults)
			}
			tw.Flush()
			fmt.Fprintln(a.out)
			tw = tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "BINDING\tALG\tPROVIDER\tSUBMITTED\tCOMPLETED\tRETRIED\tFAILED\tREBINDS")
			for _, b := range v.Bindings {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\n", b.ID, b.Alg, b.Provider, b.Submitted, b.Completed, b.Retried, b.Failed, b.Rebinds)
			}
			return tw.Flush()
		},
	}
}

func speed(p builtin.Provider, alg string) string {
	for _, t := range p.Throughput {
		if t.Alg == alg && t.Size == 1420 {
			return fmt.Sprintf("%.0f MB/s", t.MBPerSec)
		}
	}
	return "-"
}

// getIPsec fetches an ipsec view; ok is false (and "ipsec not running"
// printed) when the engine is not running.
func (a *app) getIPsec(path string) (v builtin.IPsec, ok bool, err error) {
	ctx, cancel := a.ctx()
	defer cancel()
	if err := a.client().Get(ctx, path, nil, &v); err != nil {
		return v, false, err
	}
	if a.json {
		return v, false, a.printJSON(v)
	}
	if !v.Running {
		fmt.Fprintln(a.out, "ipsec not running")
		return v, false, exitError{3}
	}
	return v, true, nil
}

// printInterfaces prints the gateway interfaces' counters: OUT is what was
// read from the TUN and sent as ESP, IN what was received and written to the
// TUN.
func printInterfaces(w io.Writer, ifs []builtin.Interface) {
	if len(ifs) == 0 {
		fmt.Fprintln(w, "no gateway interface (ipsec_tun is not set)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IF\tENCAP\tOUTER\tLOCAL\tPEER\tMTU\tOUT PKTS\tOUT BYTES\tOUT DROPS\tIN PKTS\tIN BYTES\tIN DROPS")
	for _, i := range ifs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", i.Name, i.Encap, i.Outer, i.Local, orDash(nonEmpty(i.Peer)), i.MTU,
			i.Out.Packets, i.Out.Bytes, i.Out.DropTotal, i.In.Packets, i.In.Bytes, i.In.DropTotal)
	}
	tw.Flush()
	for _, i := range ifs {
		if len(i.Out.Drops) > 0 || len(i.In.Drops) > 0 {
			fmt.Fprintf(w, "%s drops: out %s; in %s\n", i.Name, drops(i.Out.Drops), drops(i.In.Drops))
		}
		if i.Error != "" {
			fmt.Fprintf(w, "%s FAILED: %s\n", i.Name, i.Error)
		}
	}
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

func printSAs(w io.Writer, v builtin.IPsec) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SPI\tSRC\tDST\tMODE\tALG\tPROVIDER\tREBINDS\tOUT PKTS\tOUT BYTES\tIN PKTS\tIN BYTES\tDROPS")
	for _, s := range v.SAs {
		fmt.Fprintf(tw, "0x%x\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", s.SPI, s.Src, s.Dst, s.Mode, s.Alg, s.Provider, s.Rebinds,
			s.OutPackets, s.OutBytes, s.InPackets, s.InBytes, drops(s.Drops))
	}
	tw.Flush()
	if v.Counters != nil {
		fmt.Fprintf(w, "\ntotal: out %d pkts, in %d pkts, bypass %d; drops: %s\n", v.Counters.OutPackets, v.Counters.InPackets, v.Counters.Bypass, drops(v.Drops))
	}
	if v.Pktgen != "" {
		fmt.Fprintf(w, "pktgen: %s\n", v.Pktgen)
	}
}

func (a *app) ipsecCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ipsec",
		Short: "Show the IPsec gateway interfaces and SAs (never keys); sa, spd and if for one part",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			v, ok, err := a.getIPsec("/v1/ipsec")
			if !ok {
				return err
			}
			printInterfaces(a.out, v.Interfaces)
			fmt.Fprintln(a.out)
			printSAs(a.out, v)
			return nil
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "if",
		Short: "Gateway interfaces (ipsec_tun) with packet, byte and drop counters per direction",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			v, ok, err := a.getIPsec("/v1/ipsec/if")
			if !ok {
				return err
			}
			printInterfaces(a.out, v.Interfaces)
			return nil
		},
	}, &cobra.Command{
		Use:   "sa",
		Short: "SAs with counters, drops by reason and the bound provider",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			v, ok, err := a.getIPsec("/v1/ipsec/sa")
			if !ok {
				return err
			}
			printSAs(a.out, v)
			return nil
		},
	}, &cobra.Command{
		Use:   "spd",
		Short: "Security policies in order",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := a.ctx()
			defer cancel()
			var v builtin.IPsec
			if err := a.client().Get(ctx, "/v1/ipsec/spd", nil, &v); err != nil {
				return err
			}
			if a.json {
				return a.printJSON(v)
			}
			if !v.Running {
				fmt.Fprintln(a.out, "ipsec not running")
				return exitError{3}
			}
			for _, p := range v.Policies {
				fmt.Fprintf(a.out, "%3d  %s;\t# %s\n", p.Index, p.Policy, p.Pos)
			}
			return nil
		},
	})
	return cmd
}

func drops(m map[string]uint64) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, ",")
}

func (a *app) timeline() (services.Timeline, error) {
	ctx, cancel := a.ctx()
	defer cancel()
	var tl services.Timeline
	err := a.client().Get(ctx, "/v1/boot", nil, &tl)
	return tl, err
}

func (a *app) bootCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "boot",
		Short: "Boot timeline (table), plot and critical chain",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			tl, err := a.timeline()
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(tl)
			}
			spans := append([]services.Span(nil), tl.Spans...)
			sort.SliceStable(spans, func(i, j int) bool { return spans[i].Start < spans[j].Start })
			fmt.Fprintf(a.out, "boot finished after %s\n", dur(tl.Finished))
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SERVICE\tSTATE\tSTART\tREADY\tTOOK\tREQUIRES")
			for _, s := range spans {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.State, dur(s.Start), dur(s.Ready), dur(s.Ready-s.Start), orDash(s.Requires))
			}
			return tw.Flush()
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "plot",
		Short: "Write the boot timeline as an SVG Gantt chart to stdout",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			tl, err := a.timeline()
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(tl)
			}
			return services.PlotSVG(a.out, tl)
		},
	}, &cobra.Command{
		Use:   "critical-chain",
		Short: "The chain of services that determined when boot finished",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			tl, err := a.timeline()
			if err != nil {
				return err
			}
			chain := services.CriticalChain(tl)
			if a.json {
				return a.printJSON(chain)
			}
			fmt.Fprintf(a.out, "boot finished after %s\n", dur(tl.Finished))
			for i, s := range chain {
				fmt.Fprintf(a.out, "%s%s @%s +%s\n", strings.Repeat("  ", len(chain)-1-i), s.Name, dur(s.Start), dur(s.Ready-s.Start))
			}
			return nil
		},
	})
	return cmd
}

func (a *app) graphCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "graph",
		Short: "Print the service dependency graph in DOT",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := a.ctx()
			defer cancel()
			var raw []byte
			if err := a.client().Get(ctx, "/v1/graph", nil, &raw); err != nil {
				return err
			}
			if a.json {
				return a.printJSON(map[string]string{"dot": string(raw)})
			}
			_, err := a.out.Write(raw)
			return err
		},
	}
}

func (a *app) shutdownCmd() *cobra.Command {
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "shutdown",
		Short: "Stop every service in reverse order and exit keeld",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := a.ctx()
			defer cancel()
			var res map[string]string
			if err := a.client().Post(ctx, "/v1/shutdown", nil, &res); err != nil {
				return err
			}
			deadline := time.Now().Add(wait)
			for time.Now().Before(deadline) {
				var info api.BootInfo
				if err := a.client().Get(ctx, "/v1/boot/status", nil, &info); err != nil {
					break // keeld is gone
				}
				time.Sleep(50 * time.Millisecond)
			}
			if a.json {
				return a.printJSON(map[string]string{"status": "stopped"})
			}
			fmt.Fprintln(a.out, "keeld stopped")
			return nil
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", 60*time.Second, "how long to wait for keeld to exit")
	return cmd
}
