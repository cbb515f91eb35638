package builtin

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keelinit/keel/ipsec"
	"github.com/keelinit/keel/ipsec/dataplane"
	"github.com/keelinit/keel/modules"
	"github.com/keelinit/keel/services/api"
)

// Throughput is a calibrated speed, JSON-friendly.
type Throughput struct {
	Alg      string  `json:"alg"`
	Size     int     `json:"size"`
	MBPerSec float64 `json:"mb_per_sec"`
}

// Provider is GET /v1/crypto's view of a crypto provider.
type Provider struct {
	Name       string            `json:"name"`
	Kind       string            `json:"kind"`
	State      string            `json:"state"`
	Emulated   bool              `json:"emulated,omitempty"`
	Priority   int               `json:"priority"`
	Params     map[string]string `json:"params,omitempty"`
	SelfTest   string            `json:"self_test"`
	SelfTestOK bool              `json:"self_test_ok"`
	Throughput []Throughput      `json:"throughput,omitempty"`
	Sessions   int64             `json:"sessions"`
	RebindsIn  uint64            `json:"rebinds_in"`
	RebindsOut uint64            `json:"rebinds_out"`
	Faults     uint64            `json:"faults"`
	LastFault  string            `json:"last_fault,omitempty"`
}

// Binding is GET /v1/crypto's view of a binding.
type Binding struct {
	ID        uint64 `json:"id"`
	Alg       string `json:"alg"`
	Provider  string `json:"provider"`
	Submitted uint64 `json:"submitted"`
	Completed uint64 `json:"completed"`
	Retried   uint64 `json:"retried"`
	Failed    uint64 `json:"failed"`
	Rebinds   uint64 `json:"rebinds"`
	InFlight  int    `json:"in_flight"`
}

// Crypto is GET /v1/crypto.
type Crypto struct {
	Running   bool       `json:"running"`
	Providers []Provider `json:"providers"`
	Bindings  []Binding  `json:"bindings"`
}

// SA is GET /v1/ipsec/sa's view of an SA. It never contains keys.
type SA struct {
	Src          string            `json:"src"`
	Dst          string            `json:"dst"`
	Proto        string            `json:"proto"`
	SPI          uint32            `json:"spi"`
	Mode         string            `json:"mode"`
	ReqID        uint32            `json:"reqid,omitempty"`
	ESN          bool              `json:"esn,omitempty"`
	Alg          string            `json:"alg"`
	ReplayWindow int               `json:"replay_window"`
	State        string            `json:"state"`
	Expired      string            `json:"expired,omitempty"` // the lifetime that made it dying or dead
	Provider     string            `json:"provider"`
	Rebinds      uint64            `json:"rebinds"`
	Seq          uint64            `json:"seq"`
	OutPackets   uint64            `json:"out_packets"`
	OutBytes     uint64            `json:"out_bytes"`
	InPackets    uint64            `json:"in_packets"`
	InBytes      uint64            `json:"in_bytes"`
	Drops        map[string]uint64 `json:"drops,omitempty"`
	Pos          string            `json:"pos,omitempty"`
}

// Policy is GET /v1/ipsec/spd's view of a policy.
type Policy struct {
	Index  int    `json:"index"`
	Dir    string `json:"dir"`
	Policy string `json:"policy"` // setkey spdadd syntax
	Pos    string `json:"pos,omitempty"`
}

// IfDir is one direction of an Interface's counters.
type IfDir struct {
	// ReadPackets and ReadBytes count what the gateway read: plaintext
	// from the TUN (out) or datagrams from the outer socket (in).
	ReadPackets uint64 `json:"read_packets"`
	ReadBytes   uint64 `json:"read_bytes"`
	// Packets and Bytes count what it delivered: ESP packets sent (out),
	// inner packets written to the TUN (in).
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
	// Drops by reason (zero counts omitted) and their total.
	Drops     map[string]uint64 `json:"drops,omitempty"`
	DropTotal uint64            `json:"drop_total"`
}

// IfPeer is one peer of an Interface: a remote endpoint some SA names.
type IfPeer struct {
	// Addr is the peer's outer address, with the port for ESP-in-UDP
	// ("10.99.0.2:4500").
	Addr string `json:"addr"`
	// Out counts the ESP packets sent to the peer (OutDrops: sends that
	// failed); In the inner packets received from it (InDrops: its ESP
	// packets dropped).
	OutPackets uint64 `json:"out_packets"`
	OutBytes   uint64 `json:"out_bytes"`
	OutDrops   uint64 `json:"out_drops"`
	InPackets  uint64 `json:"in_packets"`
	InBytes    uint64 `json:"in_bytes"`
	InDrops    uint64 `json:"in_drops"`
}

// Interface is GET /v1/ipsec/if's view of the gateway's interface
// (rc.conf ipsec_tun).
type Interface struct {
	Name  string `json:"name"`
	MTU   int    `json:"mtu"`
	Encap string `json:"encap"` // udp or esp
	Outer string `json:"outer"` // e.g. udp:4500, esp:10.99.0.1
	Local string `json:"local"`
	Peer  string `json:"peer,omitempty"`
	Out   IfDir  `json:"out"`
	In    IfDir  `json:"in"`
	// Peers are the counters of every peer the SAs name.
	Peers []IfPeer `json:"peers,omitempty"`
	// Error is why the gateway's loops stopped, if they did.
	Error string `json:"error,omitempty"`
}

// IPsec is GET /v1/ipsec (everything), /v1/ipsec/sa, /v1/ipsec/spd and
// /v1/ipsec/if (the part named).
type IPsec struct {
	Running    bool              `json:"running"`
	Interfaces []Interface       `json:"interfaces,omitempty"`
	SAs        []SA              `json:"sas,omitempty"`
	Policies   []Policy          `json:"policies,omitempty"`
	Counters   *ipsec.Counters   `json:"counters,omitempty"`
	Pktgen     string            `json:"pktgen,omitempty"`
	Drops      map[string]uint64 `json:"drops,omitempty"`
	// NonceLedger is the state of the AEAD nonce ledger.
	NonceLedger *ipsec.LedgerStats `json:"nonce_ledger,omitempty"`
}

// ModuleRequest is the body of POST /v1/modules/load and /unload. Names
// (or Name, for one module) are loaded, or unloaded as a whole: all or
// nothing, refused with 409 while they are in use unless Force.
type ModuleRequest struct {
	Name  string   `json:"name,omitempty"`
	Names []string `json:"names,omitempty"`
	Force bool     `json:"force,omitempty"`
}

// names returns the modules the request names.
func (r ModuleRequest) names() []string {
	if r.Name != "" {
		return append([]string{r.Name}, r.Names...)
	}
	return r.Names
}

// CryptoView returns the crypto status.
func (s *System) CryptoView() Crypto {
	fw := s.Framework()
	if fw == nil {
		return Crypto{}
	}
	out := Crypto{Running: true}
	for _, p := range fw.Providers() {
		v := Provider{Name: p.Name, Kind: p.Kind.String(), State: string(p.State), Emulated: p.Emulated,
			Priority: p.Priority, Params: p.Params, SelfTest: selfTestText(p.SelfTest), SelfTestOK: p.SelfTest.Passed,
			Sessions: p.Sessions, RebindsIn: p.RebindsIn, RebindsOut: p.RebindsOut, Faults: p.Faults, LastFault: p.LastFault}
		for _, t := range p.Throughput {
			v.Throughput = append(v.Throughput, Throughput{Alg: t.Alg.String(), Size: t.Size, MBPerSec: t.BytesPerSec / 1e6})
		}
		out.Providers = append(out.Providers, v)
	}
	for _, b := range fw.Bindings() {
		out.Bindings = append(out.Bindings, Binding{ID: b.ID, Alg: b.Alg.String(), Provider: b.Provider, Submitted: b.Submitted,
			Completed: b.Completed, Retried: b.Retried, Failed: b.Failed, Rebinds: b.Rebinds, InFlight: b.InFlight})
	}
	return out
}

func saView(sa ipsec.SAStatus) SA {
	return SA{Src: sa.Src.Addr().String(), Dst: sa.Dst.Addr().String(), Proto: sa.Proto.String(), SPI: sa.SPI,
		Mode: fmt.Sprint(sa.Mode), ReqID: sa.ReqID, ESN: sa.ESN, Alg: sa.Alg.String(), ReplayWindow: sa.ReplayWindow,
		State: sa.State, Expired: sa.Expired, Provider: sa.Provider, Rebinds: sa.Rebinds, Seq: sa.Seq, OutPackets: sa.OutPackets,
		OutBytes: sa.OutBytes, InPackets: sa.InPackets, InBytes: sa.InBytes, Drops: nonZero(sa.Drops), Pos: sa.Pos}
}

func nonZero(d ipsec.Drops) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range d {
		if v != 0 {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func ifDir(d dataplane.DirStatus) IfDir {
	return IfDir{ReadPackets: d.ReadPackets, ReadBytes: d.ReadBytes, Packets: d.Packets, Bytes: d.Bytes, Drops: d.Drops, DropTotal: d.DropTotal}
}

func ifView(st dataplane.Status) Interface {
	v := Interface{Name: st.Interface, MTU: st.MTU, Encap: st.Encap, Outer: st.Outer, Local: st.Local.String(),
		Out: ifDir(st.Out), In: ifDir(st.In), Error: st.Err}
	if st.Peer.IsValid() {
		v.Peer = st.Peer.String()
	}
	for _, p := range st.Peers {
		addr := p.Addr.String()
		if p.Addr.Port() == 0 {
			addr = p.Addr.Addr().String()
		}
		v.Peers = append(v.Peers, IfPeer{Addr: addr, OutPackets: p.OutPackets, OutBytes: p.OutBytes, OutDrops: p.OutDrops,
			InPackets: p.InPackets, InBytes: p.InBytes, InDrops: p.InDrops})
	}
	return v
}

// IPsecView returns the gateway interfaces, the SAs (without keys) and the
// policies.
func (s *System) IPsecView() IPsec {
	eng := s.ips.engine()
	if eng == nil {
		return IPsec{}
	}
	out := IPsec{Running: true}
	if gw := s.ips.gateway(); gw != nil {
		out.Interfaces = append(out.Interfaces, ifView(gw.Status()))
	}
	for _, sa := range eng.SAs() {
		out.SAs = append(out.SAs, saView(sa))
	}
	for _, p := range eng.Policies() {
		out.Policies = append(out.Policies, Policy{Index: p.Index, Dir: p.Dir.String(), Policy: p.String(), Pos: p.Pos})
	}
	c := eng.Counters()
	out.Counters = &c
	out.Drops = nonZero(c.Drops)
	if s.pg.running() {
		out.Pktgen = s.pg.Status()
	}
	if l := s.ips.currentLedger(); l != nil {
		st := l.Stats()
		out.NonceLedger = &st
	}
	return out
}

func (g *pktgenService) running() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cancel != nil
}

// Summary returns the lines keeld prints after boot: the gateway, if any,
// and each SA's provider.
func (s *System) Summary() []string {
	var out []string
	if gw := s.ips.gateway(); gw != nil {
		st := gw.Status()
		out = append(out, fmt.Sprintf("gateway %s, outer %s, mtu %d", tunText(st), st.Outer, st.MTU))
	}
	if eng := s.ips.engine(); eng != nil {
		for _, sa := range eng.SAs() {
			out = append(out, fmt.Sprintf("SA spi 0x%x %s %s->%s: bound to %s after %d rebind(s)", sa.SPI, sa.Alg, sa.Src.Addr(), sa.Dst.Addr(), orNone(sa.Provider), sa.Rebinds))
		}
	}
	return out
}

func (s *System) mount(srv *api.Server) {
	srv.Handle("GET /v1/modules", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		api.WriteJSON(w, 200, s.ModuleStat())
	}))
	modOp := func(load bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			var req ModuleRequest
			err := api.DecodeBody(r, &req)
			names := req.names()
			if err != nil || len(names) == 0 || slices.Contains(names, "") {
				api.WriteError(w, http.StatusBadRequest, fmt.Errorf("body: want {\"name\": ...} or {\"names\": [...]}: %v", err))
				return
			}
			ctx := s.modCtx(r.Context())
			t0 := time.Now()
			switch {
			case load && len(names) == 1:
				_, err = s.loader.LoadOne(ctx, names[0])
			case load:
				err = s.loader.Load(ctx, names...)
			default:
				var opts []modules.UnloadOption
				if req.Force {
					opts = append(opts, modules.Force())
				}
				err = s.loader.UnloadAll(ctx, names, opts...)
			}
			switch {
			case errors.Is(err, modules.ErrUnknown) || errors.Is(err, modules.ErrNotLoaded):
				api.WriteError(w, http.StatusNotFound, err)
				return
			case err != nil:
				api.WriteError(w, http.StatusConflict, err)
				return
			}
			verb := "unloaded"
			if load {
				verb = "loaded"
			}
			if req.Force && !load {
				verb = "force-unloaded"
			}
			s.log.Info(fmt.Sprintf("kld: %s %s in %v (control API)", verb, strings.Join(names, " "), time.Since(t0).Round(time.Microsecond)))
			api.WriteJSON(w, 200, s.ModuleStat())
		}
	}
	srv.Handle("POST /v1/modules/load", modOp(true))
	srv.Handle("POST /v1/modules/unload", modOp(false))
	srv.Handle("GET /v1/crypto", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		api.WriteJSON(w, 200, s.CryptoView())
	}))
	srv.Handle("GET /v1/ipsec", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		api.WriteJSON(w, 200, s.IPsecView())
	}))
	srv.Handle("GET /v1/ipsec/sa", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := s.IPsecView()
		v.Policies, v.Interfaces = nil, nil
		api.WriteJSON(w, 200, v)
	}))
	srv.Handle("GET /v1/ipsec/spd", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := s.IPsecView()
		v.SAs, v.Interfaces = nil, nil
		api.WriteJSON(w, 200, v)
	}))
	srv.Handle("GET /v1/ipsec/if", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := s.IPsecView()
		// Only the interfaces, with the engine-wide drops for context.
		v.SAs, v.Policies, v.Counters, v.Pktgen = nil, nil, nil, ""
		api.WriteJSON(w, 200, v)
	}))
}

// collector exports providers and SAs to Prometheus.
type collector struct{ s *System }

var (
	descProvState = prometheus.NewDesc("keel_crypto_provider_state", "1 for the provider's current state.", []string{"provider", "kind", "state"}, nil)
	descProvTput  = prometheus.NewDesc("keel_crypto_provider_calibrated_bytes_per_second", "Calibrated throughput.", []string{"provider", "alg", "size"}, nil)
	descProvSess  = prometheus.NewDesc("keel_crypto_provider_sessions", "Open sessions.", []string{"provider"}, nil)
	descProvReb   = prometheus.NewDesc("keel_crypto_provider_rebinds_in_total", "Bindings moved to the provider.", []string{"provider"}, nil)
	descProvBytes = prometheus.NewDesc("keel_crypto_provider_sa_bytes_total", "Inner bytes through SAs currently bound to the provider.", []string{"provider"}, nil)
	descSAPkts    = prometheus.NewDesc("keel_ipsec_sa_packets_total", "Packets through the SA.", []string{"spi", "dir"}, nil)
	descSABytes   = prometheus.NewDesc("keel_ipsec_sa_bytes_total", "Inner bytes through the SA.", []string{"spi", "dir"}, nil)
	descSADrops   = prometheus.NewDesc("keel_ipsec_sa_drops_total", "Packets dropped on the SA, by reason.", []string{"spi", "reason"}, nil)
	descSARebinds = prometheus.NewDesc("keel_ipsec_sa_rebinds_total", "Crypto rebinds of the SA.", []string{"spi", "provider"}, nil)
	descSANoProv  = prometheus.NewDesc("keel_ipsec_sa_no_provider", "1 while the SA's crypto binding has no provider (its provider was unloaded by force): its traffic is dropped as no-provider.", []string{"spi"}, nil)
	descIfPkts    = prometheus.NewDesc("keel_ipsec_if_packets_total", "Packets delivered by the gateway interface: ESP sent (out), inner packets to the TUN (in).", []string{"if", "dir"}, nil)
	descIfBytes   = prometheus.NewDesc("keel_ipsec_if_bytes_total", "Bytes delivered by the gateway interface: ESP bytes sent (out), inner bytes to the TUN (in).", []string{"if", "dir"}, nil)
	descIfRead    = prometheus.NewDesc("keel_ipsec_if_read_packets_total", "Packets read by the gateway interface: from the TUN (out), from the outer socket (in).", []string{"if", "dir"}, nil)
	descIfDrops   = prometheus.NewDesc("keel_ipsec_if_drops_total", "Packets dropped by the gateway interface, by direction and reason.", []string{"if", "dir", "reason"}, nil)
	descSAExpired = prometheus.NewDesc("keel_ipsec_sa_expired_total", "SA lifetime events: soft (rekey due) or hard (SA dead) lifetime reached, by the lifetime that ran out (time, bytes, packets, sequence numbers).", []string{"lifetime", "reason"}, nil)
	descSAs       = prometheus.NewDesc("keel_ipsec_sas", "Installed SAs by state (mature, dying, dead).", []string{"state"}, nil)
	descIfUp      = prometheus.NewDesc("keel_ipsec_if_up", "1 while the gateway's loops run, 0 after they stopped on an error.", []string{"if", "encap", "outer"}, nil)
	descPeerPkts  = prometheus.NewDesc("keel_ipsec_peer_packets_total", "Packets of one peer: ESP sent to it (out), inner packets from it to the TUN (in).", []string{"if", "peer", "dir"}, nil)
	descPeerBytes = prometheus.NewDesc("keel_ipsec_peer_bytes_total", "Bytes of one peer: ESP bytes sent to it (out), inner bytes from it to the TUN (in).", []string{"if", "peer", "dir"}, nil)
	descPeerDrops = prometheus.NewDesc("keel_ipsec_peer_drops_total", "Packets of one peer dropped: failed sends (out), its ESP packets dropped (in).", []string{"if", "peer", "dir"}, nil)

	descLedgerWritable = prometheus.NewDesc("keel_ipsec_nonce_ledger_writable", "1 while the nonce ledger file is written, 0 while its writes fail (AEAD SAs stop once their range is used up).", []string{"ledger"}, nil)
	descLedgerErrors   = prometheus.NewDesc("keel_ipsec_nonce_ledger_write_errors_total", "Failed reads and writes of the nonce ledger file.", []string{"ledger"}, nil)
	descLedgerUnrec    = prometheus.NewDesc("keel_ipsec_nonce_unrecorded_keys_total", "AEAD keys started at sequence 1 because the nonce ledger had no entry for them.", []string{"ledger"}, nil)
	descLedgerUnsafe   = prometheus.NewDesc("keel_ipsec_nonce_ledger_unsafe", "1 when the nonce ledger was lost or rolled back and opened anyway by the policy (label).", []string{"ledger", "policy"}, nil)
	descLedgerRefused  = prometheus.NewDesc("keel_ipsec_nonce_ledger_refused_total", "Starts and reloads of ipsec refused because the nonce ledger was unsafe or unreadable.", nil, nil)
)

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descProvState, descProvTput, descProvSess, descProvReb, descProvBytes, descSAPkts, descSABytes, descSADrops, descSARebinds, descSAExpired, descSAs, descSANoProv,
		descIfPkts, descIfBytes, descIfRead, descIfDrops, descIfUp, descPeerPkts, descPeerBytes, descPeerDrops,
		descLedgerWritable, descLedgerErrors, descLedgerUnrec, descLedgerUnsafe, descLedgerRefused} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	cv := c.s.CryptoView()
	provBytes := map[string]float64{}
	for _, p := range cv.Providers {
		provBytes[p.Name] = 0
	}
	for k, n := range c.s.ips.expiry.snapshot() {
		lt := "soft"
		if k.hard {
			lt = "hard"
		}
		ch <- prometheus.MustNewConstMetric(descSAExpired, prometheus.CounterValue, float64(n), lt, k.reason)
	}
	if eng := c.s.ips.engine(); eng != nil {
		sas := eng.SAs()
		states := map[string]float64{"mature": 0, "dying": 0, "dead": 0}
		for _, sa := range sas {
			states[sa.State]++
		}
		for st, n := range states {
			ch <- prometheus.MustNewConstMetric(descSAs, prometheus.GaugeValue, n, st)
		}
		for _, sa := range sas {
			spi := fmt.Sprintf("0x%x", sa.SPI)
			ch <- prometheus.MustNewConstMetric(descSAPkts, prometheus.CounterValue, float64(sa.OutPackets), spi, "out")
			ch <- prometheus.MustNewConstMetric(descSAPkts, prometheus.CounterValue, float64(sa.InPackets), spi, "in")
			ch <- prometheus.MustNewConstMetric(descSABytes, prometheus.CounterValue, float64(sa.OutBytes), spi, "out")
			ch <- prometheus.MustNewConstMetric(descSABytes, prometheus.CounterValue, float64(sa.InBytes), spi, "in")
			ch <- prometheus.MustNewConstMetric(descSARebinds, prometheus.CounterValue, float64(sa.Rebinds), spi, sa.Provider)
			noProv := 0.0
			if sa.Provider == "" {
				noProv = 1
			}
			ch <- prometheus.MustNewConstMetric(descSANoProv, prometheus.GaugeValue, noProv, spi)
			for _, reason := range slices.Sorted(maps.Keys(sa.Drops)) {
				ch <- prometheus.MustNewConstMetric(descSADrops, prometheus.CounterValue, float64(sa.Drops[reason]), spi, reason)
			}
			if _, ok := provBytes[sa.Provider]; ok {
				provBytes[sa.Provider] += float64(sa.OutBytes + sa.InBytes)
			}
		}
	}
	if gw := c.s.ips.gateway(); gw != nil {
		st := gw.Status()
		up := 1.0
		if st.Err != "" {
			up = 0
		}
		ch <- prometheus.MustNewConstMetric(descIfUp, prometheus.GaugeValue, up, st.Interface, st.Encap, st.Outer)
		for _, d := range []struct {
			dir string
			st  dataplane.DirStatus
		}{{"out", st.Out}, {"in", st.In}} {
			ch <- prometheus.MustNewConstMetric(descIfPkts, prometheus.CounterValue, float64(d.st.Packets), st.Interface, d.dir)
			ch <- prometheus.MustNewConstMetric(descIfBytes, prometheus.CounterValue, float64(d.st.Bytes), st.Interface, d.dir)
			ch <- prometheus.MustNewConstMetric(descIfRead, prometheus.CounterValue, float64(d.st.ReadPackets), st.Interface, d.dir)
			for _, reason := range slices.Sorted(maps.Keys(d.st.Drops)) {
				ch <- prometheus.MustNewConstMetric(descIfDrops, prometheus.CounterValue, float64(d.st.Drops[reason]), st.Interface, d.dir, reason)
			}
		}
		for _, p := range ifView(st).Peers {
			for _, m := range []struct {
				d       *prometheus.Desc
				out, in uint64
			}{{descPeerPkts, p.OutPackets, p.InPackets}, {descPeerBytes, p.OutBytes, p.InBytes}, {descPeerDrops, p.OutDrops, p.InDrops}} {
				ch <- prometheus.MustNewConstMetric(m.d, prometheus.CounterValue, float64(m.out), st.Interface, p.Addr, "out")
				ch <- prometheus.MustNewConstMetric(m.d, prometheus.CounterValue, float64(m.in), st.Interface, p.Addr, "in")
			}
		}
	}
	if l := c.s.ips.currentLedger(); l != nil {
		st := l.Stats()
		ok, unsafe := 1.0, 0.0
		if st.Err != "" {
			ok = 0
		}
		if st.Incident != "" {
			unsafe = 1
		}
		ch <- prometheus.MustNewConstMetric(descLedgerWritable, prometheus.GaugeValue, ok, st.Path)
		ch <- prometheus.MustNewConstMetric(descLedgerErrors, prometheus.CounterValue, float64(st.WriteErrors), st.Path)
		ch <- prometheus.MustNewConstMetric(descLedgerUnrec, prometheus.CounterValue, float64(st.UnrecordedKeys), st.Path)
		ch <- prometheus.MustNewConstMetric(descLedgerUnsafe, prometheus.GaugeValue, unsafe, st.Path, string(st.Policy))
	}
	ch <- prometheus.MustNewConstMetric(descLedgerRefused, prometheus.CounterValue, float64(c.s.ips.ledgerRefused.Load()))
	for _, p := range cv.Providers {
		ch <- prometheus.MustNewConstMetric(descProvState, prometheus.GaugeValue, 1, p.Name, p.Kind, p.State)
		ch <- prometheus.MustNewConstMetric(descProvSess, prometheus.GaugeValue, float64(p.Sessions), p.Name)
		ch <- prometheus.MustNewConstMetric(descProvReb, prometheus.CounterValue, float64(p.RebindsIn), p.Name)
		ch <- prometheus.MustNewConstMetric(descProvBytes, prometheus.GaugeValue, provBytes[p.Name], p.Name)
		for _, t := range p.Throughput {
			ch <- prometheus.MustNewConstMetric(descProvTput, prometheus.GaugeValue, t.MBPerSec*1e6, p.Name, t.Alg, fmt.Sprint(t.Size))
		}
	}
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
