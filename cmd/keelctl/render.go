package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/keelinit/keel/modules"
	"github.com/keelinit/keel/services"
	"github.com/keelinit/keel/services/builtin"
)

// The renderers print what keeld answered in the human form (--json prints
// the answer itself). Each has the shape func(io.Writer, T) error so that
// show and the command helpers can take any of them. As keelctl always did,
// the tables of kldstat, crypto and boot report the writer's error; the
// other views print on a best-effort basis and return nil (or exitError).

// newTable returns the tabwriter every table uses.
func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

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

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n-3] + "..."
	}
	return s
}

// noProvider renders an unbound SA's or binding's provider "" as
// builtin.NoProvider, as keeld's own status lines do.
func noProvider(p string) string {
	if p == "" {
		return builtin.NoProvider
	}
	return p
}

func orDash(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, " ")
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// drops formats drop counters by reason, sorted: "bad-icv=2,replay=1".
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

// printTable is keelctl status: one row a service and a count by state.
func printTable(w io.Writer, st []services.Status) error {
	tw := newTable(w)
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
		state := string(s.State)
		if s.Degraded != "" {
			state += " (degraded)"
			reason = "degraded: " + s.Degraded
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Type, state, pid, since(s.Since), dur(s.Duration), truncate(reason, 90))
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
	return nil
}

// printDetail is keelctl status NAME, in the form of systemctl status.
func printDetail(w io.Writer, d services.Detail) error {
	dot := "●"
	fmt.Fprintf(w, "%s %s - %s service (%s)\n", dot, d.Name, d.Type, d.Path)
	active := string(d.State)
	if d.Degraded != "" {
		active += " (degraded: " + d.Degraded + ")"
	}
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
	return nil
}

// printState is the answer of start, stop, restart and reload NAME.
func printState(w io.Writer, d services.Detail) error {
	fmt.Fprintf(w, "%s: %s\n", d.Name, d.State)
	return nil
}

// printReload is the answer of keelctl reload.
func printReload(w io.Writer, res services.ReloadResult) error {
	fmt.Fprintf(w, "restarted: %s\nstarted:   %s\nstopped:   %s\nunchanged: %d\n",
		orDash(res.Restarted), orDash(res.Started), orDash(res.Stopped), res.Unchanged)
	for _, warn := range res.Warnings {
		fmt.Fprintln(w, "warning: "+warn)
	}
	return nil
}

// printModules is kldstat, and the answer of kldload and kldunload.
func printModules(w io.Writer, st []modules.Stat) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "Id\tRefs\tName\tVersion\tKind\tState\tLoaded\tDepends on")
	var reasons []string
	for _, s := range st {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%s\t%s\t%s\t%s\n", s.ID, s.Refs, s.Name, s.Version, s.Kind, s.State, since(s.LoadedAt), orDash(s.DependsOn))
		if s.Reason != "" {
			reasons = append(reasons, fmt.Sprintf("%s %s: %s", s.Name, s.State, s.Reason))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range reasons {
		fmt.Fprintln(w, r)
	}
	return nil
}

// printCrypto is keelctl crypto: the providers, then the bindings.
func printCrypto(w io.Writer, v builtin.Crypto) error {
	tw := newTable(w)
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
	fmt.Fprintln(w)
	tw = newTable(w)
	fmt.Fprintln(tw, "BINDING\tALG\tPROVIDER\tSUBMITTED\tCOMPLETED\tRETRIED\tFAILED\tREBINDS")
	for _, b := range v.Bindings {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\n", b.ID, b.Alg, noProvider(b.Provider), b.Submitted, b.Completed, b.Retried, b.Failed, b.Rebinds)
	}
	return tw.Flush()
}

func speed(p builtin.Provider, alg string) string {
	for _, t := range p.Throughput {
		if t.Alg == alg && t.Size == 1420 {
			return fmt.Sprintf("%.0f MB/s", t.MBPerSec)
		}
	}
	return "-"
}

// printIPsec is keelctl ipsec: the gateway interfaces, then the SAs.
func printIPsec(w io.Writer, v builtin.IPsec) error {
	printInterfaces(w, v.Interfaces)
	fmt.Fprintln(w)
	return printSAs(w, v)
}

// printIPsecIf is keelctl ipsec if.
func printIPsecIf(w io.Writer, v builtin.IPsec) error { return printInterfaces(w, v.Interfaces) }

// printInterfaces prints the gateway interfaces' counters: OUT is what was
// read from the TUN and sent as ESP, IN what was received and written to the
// TUN; then, per interface, the same per peer.
func printInterfaces(w io.Writer, ifs []builtin.Interface) error {
	if len(ifs) == 0 {
		fmt.Fprintln(w, "no gateway interface (ipsec_tun is not set)")
		return nil
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "IF\tENCAP\tOUTER\tLOCAL\tPEER\tMTU\tOUT PKTS\tOUT BYTES\tOUT DROPS\tIN PKTS\tIN BYTES\tIN DROPS")
	for _, i := range ifs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", i.Name, i.Encap, i.Outer, i.Local, orDash(nonEmpty(i.Peer)), i.MTU,
			i.Out.Packets, i.Out.Bytes, i.Out.DropTotal, i.In.Packets, i.In.Bytes, i.In.DropTotal)
	}
	tw.Flush()
	for _, i := range ifs {
		if len(i.Peers) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s peers:\n", i.Name)
		tw := newTable(w)
		fmt.Fprintln(tw, "PEER\tOUT PKTS\tOUT BYTES\tOUT DROPS\tIN PKTS\tIN BYTES\tIN DROPS")
		for _, p := range i.Peers {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\n", p.Addr, p.OutPackets, p.OutBytes, p.OutDrops, p.InPackets, p.InBytes, p.InDrops)
		}
		tw.Flush()
	}
	for _, i := range ifs {
		if len(i.Out.Drops) > 0 || len(i.In.Drops) > 0 {
			fmt.Fprintf(w, "%s drops: out %s; in %s\n", i.Name, drops(i.Out.Drops), drops(i.In.Drops))
		}
		if i.Error != "" {
			fmt.Fprintf(w, "%s FAILED: %s\n", i.Name, i.Error)
		}
	}
	return nil
}

// printSAs is keelctl ipsec sa: the SAs and the engine's totals.
func printSAs(w io.Writer, v builtin.IPsec) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "SPI\tSRC\tDST\tMODE\tALG\tSTATE\tPROVIDER\tREBINDS\tOUT PKTS\tOUT BYTES\tIN PKTS\tIN BYTES\tDROPS")
	for _, s := range v.SAs {
		state := s.State
		if s.Expired != "" {
			state += " (" + s.Expired + ")"
		}
		fmt.Fprintf(tw, "0x%x\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", s.SPI, s.Src, s.Dst, s.Mode, s.Alg, orDash(nonEmpty(state)), noProvider(s.Provider), s.Rebinds,
			s.OutPackets, s.OutBytes, s.InPackets, s.InBytes, drops(s.Drops))
	}
	tw.Flush()
	if v.Counters != nil {
		fmt.Fprintf(w, "\ntotal: out %d pkts, in %d pkts, bypass %d; drops: %s\n", v.Counters.OutPackets, v.Counters.InPackets, v.Counters.Bypass, drops(v.Drops))
	}
	if v.Pktgen != "" {
		fmt.Fprintf(w, "pktgen: %s\n", v.Pktgen)
	}
	return nil
}

// printPolicies is keelctl ipsec spd: the policies in order, in setkey
// syntax.
func printPolicies(w io.Writer, v builtin.IPsec) error {
	for _, p := range v.Policies {
		fmt.Fprintf(w, "%3d  %s;\t# %s\n", p.Index, p.Policy, p.Pos)
	}
	return nil
}

// printBoot is keelctl boot: the spans by start time.
func printBoot(w io.Writer, tl services.Timeline) error {
	spans := append([]services.Span(nil), tl.Spans...)
	sort.SliceStable(spans, func(i, j int) bool { return spans[i].Start < spans[j].Start })
	fmt.Fprintf(w, "boot finished after %s\n", dur(tl.Finished))
	tw := newTable(w)
	fmt.Fprintln(tw, "SERVICE\tSTATE\tSTART\tREADY\tTOOK\tREQUIRES")
	for _, s := range spans {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.State, dur(s.Start), dur(s.Ready), dur(s.Ready-s.Start), orDash(s.Requires))
	}
	return tw.Flush()
}

// printChain is keelctl boot critical-chain: finished is the boot's
// duration, chain the services that determined it, last first.
func printChain(w io.Writer, finished time.Duration, chain []services.Span) error {
	fmt.Fprintf(w, "boot finished after %s\n", dur(finished))
	for i, s := range chain {
		fmt.Fprintf(w, "%s%s @%s +%s\n", strings.Repeat("  ", len(chain)-1-i), s.Name, dur(s.Start), dur(s.Ready-s.Start))
	}
	return nil
}
