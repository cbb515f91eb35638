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
//
// Exit status: 0 on success; 3 when the service asked about is not active
// or the subsystem shown is not running; 4 for an unknown service or a call
// keeld refused; 1 for any other error.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/keelinit/keel/services"
	"github.com/keelinit/keel/services/api"
	"github.com/keelinit/keel/services/builtin"
)

// exitError carries an exit code (LSB: 3 for "not running").
type exitError struct{ code int }

func (e exitError) Error() string { return "exit " + strconv.Itoa(e.code) }

// timeout bounds one keelctl invocation: every call it makes to keeld.
const timeout = 2 * time.Minute

type app struct {
	socket string
	json   bool
	out    io.Writer
	errOut io.Writer
	ctx    context.Context // the invocation's deadline, set by run
	api    *api.Client     // made on first use, once --socket is parsed
}

func main() {
	a := &app{out: os.Stdout, errOut: os.Stderr}
	os.Exit(a.run(os.Args[1:]))
}

// run executes the command line args and returns the exit status: the
// code of an exitError, 4 when keeld refused the call, 1 for other errors.
func (a *app) run(args []string) int {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	a.ctx = ctx
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

func (a *app) client() *api.Client {
	if a.api == nil {
		a.api = api.NewClient(a.socket)
	}
	return a.api
}

// get fetches path (with the query q) from keeld into out.
func (a *app) get(path string, q url.Values, out any) error {
	return a.client().Get(a.ctx, path, q, out)
}

// post sends in to path and decodes keeld's answer into out.
func (a *app) post(path string, in, out any) error {
	return a.client().Post(a.ctx, path, in, out)
}

func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// show prints v: as indented JSON with --json, else with render.
func show[T any](a *app, v T, render func(io.Writer, T) error) error {
	if a.json {
		return a.printJSON(v)
	}
	return render(a.out, v)
}

// runGet is the RunE of a read-only command: GET path into a T and show it.
func runGet[T any](a *app, path string, render func(io.Writer, T) error) func(*cobra.Command, []string) error {
	return func(*cobra.Command, []string) error {
		var v T
		if err := a.get(path, nil, &v); err != nil {
			return err
		}
		return show(a, v, render)
	}
}

// runPost is the RunE of a command that changes state: POST the request
// built from the arguments and show keeld's answer, a T.
func runPost[T any](a *app, req func(args []string) (path string, body any), render func(io.Writer, T) error) func(*cobra.Command, []string) error {
	return func(_ *cobra.Command, args []string) error {
		path, body := req(args)
		var v T
		if err := a.post(path, body, &v); err != nil {
			return err
		}
		return show(a, v, render)
	}
}

// ifRunning wraps the renderer of a subsystem's view: when the subsystem
// is not running it prints "<what> not running" and exits 3 instead. (With
// --json the view is printed as it is, and the exit status is 0.)
func ifRunning[T any](what string, running func(T) bool, render func(io.Writer, T) error) func(io.Writer, T) error {
	return func(w io.Writer, v T) error {
		if !running(v) {
			fmt.Fprintln(w, what+" not running")
			return exitError{3}
		}
		return render(w, v)
	}
}

// command is one row of keelctl's command table; root builds the cobra
// commands from it.
type command struct {
	use, short string
	// args checks the arguments; nil means none are accepted.
	args cobra.PositionalArgs
	// services completes the argument with the names of keeld's services.
	services bool
	run      func(*cobra.Command, []string) error
	// flags adds the command's own flags to cmd.Flags().
	flags func(cmd *cobra.Command)
	sub   []command
}

func (a *app) build(c command) *cobra.Command {
	cmd := &cobra.Command{Use: c.use, Short: c.short, Args: c.args, RunE: c.run}
	if cmd.Args == nil {
		cmd.Args = cobra.NoArgs
	}
	if c.services {
		cmd.ValidArgsFunction = a.completeServices
	}
	if c.flags != nil {
		c.flags(cmd)
	}
	for _, s := range c.sub {
		cmd.AddCommand(a.build(s))
	}
	return cmd
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
	for _, c := range a.commands() {
		root.AddCommand(a.build(c))
	}
	addExtra(root)
	return root
}

// commands is keelctl's command table.
func (a *app) commands() []command {
	var (
		lines int
		force bool
		wait  time.Duration
	)
	module := func(op string) func([]string) (string, any) {
		return func(args []string) (string, any) {
			return "/v1/modules/" + op, builtin.ModuleRequest{Names: args, Force: force}
		}
	}
	ipsecView := func(path string, render func(io.Writer, builtin.IPsec) error) func(*cobra.Command, []string) error {
		return runGet(a, path, ifRunning("ipsec", func(v builtin.IPsec) bool { return v.Running }, render))
	}
	return []command{
		{use: "status [NAME]", short: "Show services (exit 0 if NAME is active, 3 if not)", args: cobra.MaximumNArgs(1), services: true,
			run:   func(_ *cobra.Command, args []string) error { return a.status(args, lines) },
			flags: func(c *cobra.Command) { c.Flags().IntVarP(&lines, "lines", "n", 10, "log lines to show") }},
		a.action("start"),
		a.action("stop"),
		a.action("restart"),
		{use: "reload [NAME]", short: "Re-evaluate rc.conf and restart changed services, or reload one service", args: cobra.MaximumNArgs(1), services: true,
			run: func(cmd *cobra.Command, args []string) error {
				if len(args) == 1 {
					return a.action("reload").run(cmd, args)
				}
				return runPost(a, func([]string) (string, any) { return "/v1/reload", nil }, printReload)(cmd, args)
			}},
		{use: "kldstat", short: "List loaded modules", run: runGet(a, "/v1/modules", printModules)},
		{use: "kldload NAME", short: "Load a module", args: cobra.ExactArgs(1), run: runPost(a, module("load"), printModules)},
		{use: "kldunload [-f] NAME...", short: "Unload modules, as a whole (refused while in use: SAs would lose their crypto provider; -f forces)", args: cobra.MinimumNArgs(1),
			run:   runPost(a, module("unload"), printModules),
			flags: func(c *cobra.Command) { c.Flags().BoolVarP(&force, "force", "f", false, "force the unload") }},
		{use: "crypto", short: "Show crypto providers, self-tests, measured speeds, bindings and rebinds",
			run: runGet(a, "/v1/crypto", ifRunning("crypto framework", func(v builtin.Crypto) bool { return v.Running }, printCrypto))},
		{use: "ipsec", short: "Show the IPsec gateway interfaces and SAs (never keys); sa, spd and if for one part",
			run: ipsecView("/v1/ipsec", printIPsec),
			sub: []command{
				{use: "if", short: "Gateway interfaces (ipsec_tun) with packet, byte and drop counters per direction",
					run: ipsecView("/v1/ipsec/if", printIPsecIf)},
				{use: "sa", short: "SAs with counters, drops by reason and the bound provider",
					run: ipsecView("/v1/ipsec/sa", printSAs)},
				{use: "spd", short: "Security policies in order",
					run: ipsecView("/v1/ipsec/spd", printPolicies)},
			}},
		{use: "boot", short: "Boot timeline (table), plot and critical chain", run: runGet(a, "/v1/boot", printBoot),
			sub: []command{
				{use: "plot", short: "Write the boot timeline as an SVG Gantt chart to stdout", run: runGet(a, "/v1/boot", services.PlotSVG)},
				{use: "critical-chain", short: "The chain of services that determined when boot finished", run: a.criticalChain},
			}},
		{use: "graph", short: "Print the service dependency graph in DOT", run: a.graph},
		a.checkCommand(),
		{use: "shutdown", short: "Stop every service in reverse order and exit keeld",
			run: func(*cobra.Command, []string) error { return a.shutdown(wait) },
			flags: func(c *cobra.Command) {
				c.Flags().DurationVar(&wait, "wait", 60*time.Second, "how long to wait for keeld to exit")
			}},
	}
}

// action is start, stop, restart or reload NAME.
func (a *app) action(action string) command {
	return command{use: action + " NAME", short: strings.ToUpper(action[:1]) + action[1:] + " a service", args: cobra.ExactArgs(1), services: true,
		run: runPost(a, func(args []string) (string, any) {
			return "/v1/services/" + url.PathEscape(args[0]) + "/" + action, nil
		}, printState)}
}

// completeServices offers service names for shell completion.
func (a *app) completeServices(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var st []services.Status
	if err := a.get("/v1/services", nil, &st); err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	for _, s := range st {
		names = append(names, s.Name)
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// status is keelctl status [NAME]: every service and the boot's state, or
// one service in detail with the LSB exit status (3 not active, 4 unknown).
func (a *app) status(args []string, lines int) error {
	if len(args) == 0 {
		var st []services.Status
		if err := a.get("/v1/services", nil, &st); err != nil {
			return err
		}
		if a.json {
			return a.printJSON(st)
		}
		printTable(a.out, st)
		var info api.BootInfo
		if err := a.get("/v1/boot/status", nil, &info); err == nil {
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
	if err := a.get("/v1/services/"+url.PathEscape(args[0]), url.Values{"lines": {strconv.Itoa(lines)}}, &d); err != nil {
		if errors.Is(err, api.ErrNotFound) {
			fmt.Fprintln(a.errOut, "keelctl:", err)
			return exitError{4} // LSB: unknown service
		}
		return err
	}
	_ = show(a, d, printDetail)
	if !d.State.Active() {
		return exitError{3}
	}
	return nil
}

// criticalChain is keelctl boot critical-chain; --json prints the chain.
func (a *app) criticalChain(*cobra.Command, []string) error {
	var tl services.Timeline
	if err := a.get("/v1/boot", nil, &tl); err != nil {
		return err
	}
	return show(a, services.CriticalChain(tl), func(w io.Writer, chain []services.Span) error {
		return printChain(w, tl.Finished, chain)
	})
}

// graph is keelctl graph: DOT as keeld wrote it; --json wraps it as
// {"dot": ...}.
func (a *app) graph(*cobra.Command, []string) error {
	var raw []byte
	if err := a.get("/v1/graph", nil, &raw); err != nil {
		return err
	}
	if a.json {
		return a.printJSON(map[string]string{"dot": string(raw)})
	}
	_, err := a.out.Write(raw)
	return err
}

// shutdown asks keeld to stop and waits up to wait for it to exit.
func (a *app) shutdown(wait time.Duration) error {
	var res map[string]string
	if err := a.post("/v1/shutdown", nil, &res); err != nil {
		return err
	}
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		var info api.BootInfo
		if err := a.get("/v1/boot/status", nil, &info); err != nil {
			break // keeld is gone
		}
		time.Sleep(50 * time.Millisecond)
	}
	if a.json {
		return a.printJSON(map[string]string{"status": "stopped"})
	}
	fmt.Fprintln(a.out, "keeld stopped")
	return nil
}
