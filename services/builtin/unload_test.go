package builtin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keelinit/keel/crypto"
	"github.com/keelinit/keel/crypto/aesni"
	"github.com/keelinit/keel/internal/testwait"
	"github.com/keelinit/keel/ipsec"
	"github.com/keelinit/keel/ipsec/spd"
	"github.com/keelinit/keel/modules"
	"github.com/keelinit/keel/services"
)

// saProviders returns each SA's provider, by SPI.
func saProviders(b *testbed) map[uint32]string {
	out := map[uint32]string{}
	for _, sa := range b.sys.Engine().SAs() {
		out[sa.SPI] = sa.Provider
	}
	return out
}

// allOn reports whether every SA of the appliance (4) is on provider.
func allOn(b *testbed, provider string) bool {
	p := saProviders(b)
	for _, v := range p {
		if v != provider {
			return false
		}
	}
	return len(p) == 4
}

// sendOut pushes n packets through every outbound ipsec policy and
// returns the drop reasons of those not forwarded.
func sendOut(t *testing.T, b *testbed, n int) map[string]int {
	t.Helper()
	eng := b.sys.Engine()
	pool := ipsec.NewPool(0)
	drops := map[string]int{}
	for _, pol := range eng.Policies() {
		if pol.Dir != spd.DirOut || pol.Action != spd.IPsec {
			continue
		}
		for range n {
			p := pool.Get()
			if !p.SetData(innerPacket(pol.Sel, 200)) {
				t.Fatal("packet does not fit")
			}
			eng.Outbound([]*ipsec.Packet{p})
			if p.Verdict != ipsec.VerdictForward {
				drops[p.Drop.String()]++
			}
			p.Release()
		}
	}
	return drops
}

// TestUnloadProviderInUse: with the appliance's SAs on aesni and
// cryptosoft loaded too, through the control API as keelctl calls it:
//   - kldunload aesni cryptosoft is refused (busy, naming the SAs) and
//     changes nothing, though each alone could go;
//   - kldunload aesni migrates the SAs to cryptosoft, then unloads;
//   - kldunload cryptosoft is refused: nothing else serves them;
//   - kldunload -f cryptosoft strands them: "(no provider)" in status
//     and in keel_ipsec_sa_no_provider, ipsec shows degraded, and their
//     traffic is dropped as no-provider (not crypto-error);
//   - kldload aesni binds them again and clears all of that.
func TestUnloadProviderInUse(t *testing.T) {
	if !hasModule(aesni.Name) {
		t.Skip("aesni not registered on this CPU")
	}
	b := newTestbed(t, "kld_list=\"cryptosoft aesni\"\nsyslogd_enable=NO\npktgen_enable=NO\n", 2*time.Millisecond, nil)
	if err := b.m.Boot(b.ctx); err != nil {
		t.Fatal(err)
	}
	c := b.serve()
	unload := func(force bool, names ...string) error {
		var st []modules.Stat
		return c.Post(b.ctx, "/v1/modules/unload", ModuleRequest{Names: names, Force: force}, &st)
	}
	if !allOn(b, "aesni") {
		t.Fatalf("after boot: %v", saProviders(b))
	}
	ipsecStatus := func() string { return b.status("ipsec").StatusText }
	rebinds := func() map[uint32]uint64 {
		out := map[uint32]uint64{}
		for _, sa := range b.sys.Engine().SAs() {
			out[sa.SPI] = sa.Rebinds
		}
		return out
	}
	before := rebinds()
	events := b.sys.Loader().Subscribe(false)
	defer events.Close()

	err := unload(false, "aesni", "cryptosoft")
	for _, want := range []string{"is busy", "in use", "ipsec SA esp 192.0.2.1->192.0.2.2 spi 0x1001", "aes-gcm-16-128"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %v does not name %q", err, want)
		}
	}
	if !b.sys.Loader().IsLoaded("aesni") || !b.sys.Loader().IsLoaded("cryptosoft") || !allOn(b, "aesni") {
		t.Fatalf("refused unload changed something: %v", saProviders(b))
	}
	if after := rebinds(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("refused unload moved SAs (rebinds %v -> %v): it must be refused before anything moves", before, after)
	}
	if d := sendOut(t, b, 3); len(d) > 0 {
		t.Fatalf("traffic after the refused unload: drops %v", d)
	}

	if err := unload(false, "aesni"); err != nil {
		t.Fatalf("kldunload aesni (cryptosoft takes over): %v", err)
	}
	if !allOn(b, "cryptosoft") || b.sys.Loader().IsLoaded("aesni") {
		t.Fatalf("after kldunload aesni: %v", saProviders(b))
	}
	// The refusal came from Quiesce, before any module started leaving:
	// the first events are this unload's.
	for _, want := range []string{"aesni v1 unloading", "aesni v1 unloaded"} {
		if e, _ := testwait.Recv(t, testwait.Timeout, "event "+want, events.Events()); e.String() != want {
			t.Errorf("event %q, want %q (the refused unload must send none)", e, want)
		}
	}

	if err := unload(false, "cryptosoft"); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("kldunload cryptosoft (the last provider): %v", err)
	}
	if !allOn(b, "cryptosoft") || strings.Contains(ipsecStatus(), "degraded") {
		t.Fatalf("refused unload changed something: %v; %s", saProviders(b), ipsecStatus())
	}

	if err := unload(true, "cryptosoft"); err != nil {
		t.Fatalf("kldunload -f cryptosoft: %v", err)
	}
	if !allOn(b, "") {
		t.Fatalf("after kldunload -f: %v", saProviders(b))
	}
	if st := ipsecStatus(); !strings.HasPrefix(st, "degraded: 4 SA(s) with (no provider)") || !strings.Contains(st, "4 on (no provider)") {
		t.Errorf("ipsec status after kldunload -f: %q", st)
	}
	if st := b.status("ipsec"); st.State != services.StateRunning || !strings.HasPrefix(st.Degraded, "4 SA(s) with (no provider)") {
		t.Errorf("ipsec unit after kldunload -f: %s, degraded %q", st.State, st.Degraded)
	}
	if m := gather(t, services.NewCollector(b.m)); m["keel_service_degraded,service=ipsec"] != 1 {
		t.Errorf("keel_service_degraded{service=ipsec} = %v, want 1", m["keel_service_degraded,service=ipsec"])
	}
	var v IPsec
	if err := c.Get(b.ctx, "/v1/ipsec/sa", nil, &v); err != nil {
		t.Fatal(err)
	}
	metrics := gather(t, b.sys.Collectors()...)
	for _, sa := range v.SAs {
		if sa.Provider != "" {
			t.Errorf("SA 0x%x provider %q", sa.SPI, sa.Provider)
		}
		if key := fmt.Sprintf("keel_ipsec_sa_no_provider,spi=0x%x", sa.SPI); metrics[key] != 1 {
			t.Errorf("%s = %v, want 1", key, metrics[key])
		}
	}
	d := sendOut(t, b, 5)
	if d[ipsec.DropNoProvider.String()] != 10 || len(d) != 1 {
		t.Errorf("traffic on stranded SAs: drops %v, want no-provider=10", d)
	}
	perSA := 0
	for _, sa := range b.sys.Engine().SAs() {
		perSA += int(sa.Drops[ipsec.DropNoProvider.String()])
		if sa.Drops[ipsec.DropCrypto.String()] != 0 {
			t.Errorf("SA 0x%x counted crypto-error: %v", sa.SPI, sa.Drops)
		}
	}
	if perSA != 10 {
		t.Errorf("per-SA no-provider drops %d, want 10", perSA)
	}

	var st []modules.Stat
	if err := c.Post(b.ctx, "/v1/modules/load", ModuleRequest{Name: "aesni"}, &st); err != nil {
		t.Fatal(err)
	}
	if !allOn(b, "aesni") || strings.Contains(ipsecStatus(), "degraded") {
		t.Fatalf("after kldload aesni: %v; %s", saProviders(b), ipsecStatus())
	}
	metrics = gather(t, b.sys.Collectors()...)
	if k := "keel_ipsec_sa_no_provider,spi=0x1001"; metrics[k] != 0 {
		t.Errorf("%s = %v after rebinding", k, metrics[k])
	}
	if d := sendOut(t, b, 3); len(d) > 0 {
		t.Errorf("traffic after kldload aesni: drops %v", d)
	}
}

// dyingName is a provider module whose device the test kills: the module
// wires its fault handler like virtio's (fail over, then deregister).
const dyingName = "dying"

// dying is the current dying provider's fault handler.
var dying = make(chan func(error), 1)

type renamed struct {
	crypto.Provider
	name string
}

func (r renamed) Info() crypto.ProviderInfo {
	i := r.Provider.Info()
	i.Name = r.name
	return i
}

func init() {
	if !aesni.Supported() {
		return
	}
	modules.Register(crypto.ProviderModule(dyingName, 1, "test provider whose device dies", func(ctx context.Context) (crypto.Provider, error) {
		fw, _ := crypto.FromContext(ctx)
		select {
		case <-dying:
		default:
		}
		dying <- func(err error) {
			fw.ReportFault(dyingName, err)
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			fw.Deregister(dctx, dyingName)
		}
		return renamed{aesni.New(), dyingName}, nil
	}))
}

// TestKldstatFollowsFramework: a loaded provider module whose device
// died, and which the framework therefore dropped, is listed by kldstat
// (GET /v1/modules) and by the kld service's status as failed with the
// fault, not as loaded; kldunload then removes it.
func TestKldstatFollowsFramework(t *testing.T) {
	if !hasModule(dyingName) {
		t.Skip("aesni not supported on this CPU")
	}
	b := newTestbed(t, "kld_list=\"cryptosoft\"\nsyslogd_enable=NO\npktgen_enable=NO\n", 2*time.Millisecond, nil)
	if err := b.m.Boot(b.ctx); err != nil {
		t.Fatal(err)
	}
	c := b.serve()
	var st []modules.Stat
	if err := c.Post(b.ctx, "/v1/modules/load", ModuleRequest{Name: dyingName}, &st); err != nil {
		t.Fatal(err)
	}
	row := func(st []modules.Stat) modules.Stat {
		for _, r := range st {
			if r.Name == dyingName {
				return r
			}
		}
		t.Fatalf("%s not listed: %+v", dyingName, st)
		return modules.Stat{}
	}
	if r := row(st); r.State != modules.StateLoaded || r.Reason != "" {
		t.Fatalf("after kldload: %+v", r)
	}
	// The device dies; its handler returns once the framework dropped it.
	(<-dying)(errors.New("dying: device process exited"))
	if err := c.Get(b.ctx, "/v1/modules", nil, &st); err != nil {
		t.Fatal(err)
	}
	r := row(st)
	if r.State != modules.StateFailed || !strings.Contains(r.Reason, "dying: device process exited") {
		t.Errorf("kldstat after the device died: %s %q, want failed with the fault", r.State, r.Reason)
	}
	if s := b.status("kld").StatusText; !strings.Contains(s, dyingName+" failed: ") {
		t.Errorf("kld status %q does not show %s failed", s, dyingName)
	}
	if err := c.Post(b.ctx, "/v1/modules/unload", ModuleRequest{Name: dyingName}, &st); err != nil {
		t.Fatalf("kldunload of the failed module: %v", err)
	}
	for _, r := range st {
		if r.Name == dyingName {
			t.Errorf("still listed after kldunload: %+v", r)
		}
	}
}

// TestKldStopKeepsProvidersInUse: stopping kld while the SAs use the only
// provider it loaded leaves that provider loaded (the unload would strand
// them) and the SAs' traffic flowing; the stop itself succeeds, as
// FreeBSD's rc.d/kld unloads nothing.
func TestKldStopKeepsProvidersInUse(t *testing.T) {
	if !hasModule(aesni.Name) {
		t.Skip("aesni not registered on this CPU")
	}
	b := newTestbed(t, "kld_list=\"aesni\"\nsyslogd_enable=NO\npktgen_enable=NO\n", 2*time.Millisecond, nil)
	if err := b.m.Boot(b.ctx); err != nil {
		t.Fatal(err)
	}
	if !allOn(b, aesni.Name) {
		t.Fatalf("after boot: %v", saProviders(b))
	}
	// cryptodev's cryptosoft serves nothing: it may go, leaving aesni
	// the only provider.
	if err := b.sys.Loader().Unload(b.sys.modCtx(b.ctx), "cryptosoft"); err != nil {
		t.Fatal(err)
	}
	if err := b.m.Stop(b.ctx, "kld"); err != nil {
		t.Fatalf("stop kld: %v", err)
	}
	if !b.sys.Loader().IsLoaded(aesni.Name) || !allOn(b, aesni.Name) {
		t.Fatalf("after stopping kld: aesni loaded %v, SAs %v", b.sys.Loader().IsLoaded(aesni.Name), saProviders(b))
	}
	if d := sendOut(t, b, 3); len(d) > 0 {
		t.Errorf("traffic after stopping kld: drops %v", d)
	}
	if err := b.m.Shutdown(b.ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
}
