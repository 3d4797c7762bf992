// Package registry is the registry of coordination strategies: the names
// the CLI, the simulator and the server accept, what each one is, and how
// to build it.
package registry

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/adaptive"
	"github.com/tokenmesh/tokenmesh/strategy/concurrency"
	"github.com/tokenmesh/tokenmesh/strategy/drlest"
	"github.com/tokenmesh/tokenmesh/strategy/fixedwindow"
	"github.com/tokenmesh/tokenmesh/strategy/gcounter"
	"github.com/tokenmesh/tokenmesh/strategy/gdrl"
	"github.com/tokenmesh/tokenmesh/strategy/lease"
	"github.com/tokenmesh/tokenmesh/strategy/local"
	"github.com/tokenmesh/tokenmesh/strategy/owner"
	"github.com/tokenmesh/tokenmesh/strategy/quota"
	"github.com/tokenmesh/tokenmesh/strategy/regionlease"
	"github.com/tokenmesh/tokenmesh/strategy/static"
	"github.com/tokenmesh/tokenmesh/strategy/tbqueue"
)

// Info describes a strategy.
type Info struct {
	Name    string
	Summary string // one line, for --help
	Source  string // the seed section it implements
	// Centralized strategies are the ground truth: the simulator runs them
	// as one node that receives every request.
	Centralized bool
	// NotInAll keeps the strategy out of ParseList("all") (the simulator's
	// default comparison): fixedwindow counts windows, not a token bucket,
	// so comparing it with central's bucket measures nothing; grd and fps
	// are GDRL's baselines, named when compared with it.
	NotInAll bool
	// Params declares the strategy's own parameters (its package's
	// Params; the generic strategy.PartitionSpec is not listed). Config
	// validation and --param check names and types against it
	// (CheckParams); the constructor still parses the values.
	Params []strategy.ParamSpec
	New    func(cfg strategy.Config) (strategy.Strategy, error)
}

var registry = []Info{
	{Name: "central", Params: local.Params, Summary: "one bucket per key for the whole cluster; the ground truth", Source: "002 §4.3.1", Centralized: true,
		New: func(cfg strategy.Config) (strategy.Strategy, error) { return local.New("central", cfg) }},
	{Name: "local", Params: local.Params, Summary: "every node enforces the full (r, b) alone; no coordination (admits up to N times the limit)", Source: "003",
		New: func(cfg strategy.Config) (strategy.Strategy, error) { return local.New("local", cfg) }},
	{Name: "static", Params: static.Params, Summary: "every node enforces (r/N, b/N); N from membership", Source: "000 §1.2, 004 §1.2, 003",
		New: func(cfg strategy.Config) (strategy.Strategy, error) { return static.New(cfg) }},
	{Name: "owner", Params: owner.Params, Summary: "rendezvous hashing picks the key's owner; other nodes forward and wait for its verdict", Source: "003",
		New: func(cfg strategy.Config) (strategy.Strategy, error) { return owner.New(cfg) }},
	{Name: "gcounter", Params: gcounter.Params, Summary: "replicated token bucket on a G-Counter of consumed tokens; delta states per neighbour sent by flat gossip", Source: "002 ch. 3",
		New: func(cfg strategy.Config) (strategy.Strategy, error) { return gcounter.New(cfg) }},
	{Name: "tbqueue", Params: tbqueue.Params, Summary: "token-bucket queue of (time-of-birth, time-of-death) elements merged like merge sort; frequency analysis and LINF as options", Source: "002 ch. 4",
		New: func(cfg strategy.Config) (strategy.Strategy, error) { return tbqueue.New(cfg) }},
	{Name: "gdrl", Params: gdrl.Params, Summary: "each node holds a share of the rate and burst per key; neighbours move capacity towards equal performance indicators in exactly conserved transfers; a best buddy inherits a failed node's share", Source: "001, 004",
		New: func(cfg strategy.Config) (strategy.Strategy, error) { return gdrl.New(cfg) }},
	{Name: "adaptive", Params: adaptive.Params, Summary: "static sub-buckets re-split every step by a TB Adaptor (the smallest live node) in proportion to each node's offered rate and peak backlog over a sliding window", Source: "000 §5.4",
		New: func(cfg strategy.Config) (strategy.Strategy, error) { return adaptive.New(cfg) }},
	{Name: "lease", Params: lease.Params, Summary: "the key's owner (rendezvous) holds its bucket and leases whole tokens out of it to nodes with demand, which decide locally; requests without a leased token are forwarded as in owner", Source: "003, 001/004 (ours)",
		New: func(cfg strategy.Config) (strategy.Strategy, error) { return lease.New(cfg) }},
	{Name: "regionlease", Params: regionlease.Params, Summary: "lease on two tiers: the key's global owner (rendezvous over all nodes) leases its bucket's tokens to one regional owner per region (rendezvous over the region's nodes) by the region's demand; the region's nodes lease from it and decide locally; only regional owners cross the WAN", Source: "003, 001/004 (ours)",
		New: func(cfg strategy.Config) (strategy.Strategy, error) { return regionlease.New(cfg) }},
	{Name: "quota", Params: quota.Params, Summary: "the key's owner (rendezvous) divides (r, b) among quota clients (Envoy proxies over RLQS) by demand, max-min; each enforces its share locally; checks at the nodes are decided from the owner's reserve", Source: "003, 001/004, 000 §4.2 (ours)",
		NotInAll: true, New: func(cfg strategy.Config) (strategy.Strategy, error) { return quota.New(cfg) }},
	{Name: fixedwindow.Name, Params: fixedwindow.Params, Summary: "envoy ratelimit's clock-aligned fixed windows (every hit counted), decided at the key's rendezvous owner; for envoyrls algorithm: fixed_window", Source: "envoyproxy/ratelimit, 003",
		NotInAll: true, New: func(cfg strategy.Config) (strategy.Strategy, error) { return fixedwindow.New(cfg) }},
	{Name: "grd", Params: drlest.Params, Summary: "Global Random Drop, an estimation-based baseline: every node sends its per-key demand estimate to all; a request is dropped with probability (T - r)/T, T the summed estimates; no bucket", Source: "GDRL §I-C (Raghavan et al. 2007)",
		NotInAll: true, New: func(cfg strategy.Config) (strategy.Strategy, error) { return drlest.New(drlest.GRD, cfg) }},
	{Name: "fps", Params: drlest.Params, Summary: "Flow Proportional Share, an estimation-based baseline: every node sends its per-key demand estimate to all and sets its sub-token bucket to its demand's share of (r, b) every interval", Source: "GDRL §I-C (Raghavan et al. 2007)",
		NotInAll: true, New: func(cfg strategy.Config) (strategy.Strategy, error) { return drlest.New(drlest.FPS, cfg) }},
	{Name: concurrency.Name, Params: concurrency.Params, Summary: "at most N requests of a key in flight across the cluster: the key's owner (rendezvous) holds its permits (id, expiry), given back by release or lapsing after permit_ttl; a node refuses the keys it takes over for permit_ttl", Source: "003 (concurrency; ours)",
		NotInAll: true, New: func(cfg strategy.Config) (strategy.Strategy, error) { return concurrency.New(cfg) }},
}

// CheckParams checks the strategy's parameters p (unprefixed, as
// strategy.Params.For returns them) against its declarations: an unknown
// name or a value not of the declared type is an error naming the
// strategy, parameter and value (strategy.CheckParam).
func (i Info) CheckParams(p strategy.Params) error {
	return strategy.CheckParams(i.Name, i.Params, p)
}

// Snapshots reports whether the strategy keeps its bucket levels across a
// restart: it implements strategy.Snapshotter, so a node with a state_dir
// writes its buckets to disk and restores them at start; the others start
// fresh. It builds one instance with probeConfig to ask (false if that
// fails; TestEveryStrategyBuildsWithprobeConfig keeps it from failing).
func (i Info) Snapshots() bool {
	s, err := i.New(probeConfig())
	if err != nil {
		return false
	}
	_, ok := s.(strategy.Snapshotter)
	return ok
}

// FastPath is what the live node's fast path (cluster/fastpath.go) can
// take off the node's event loop for a strategy, in the caller's
// goroutine: the simulator never uses it, so it changes no simulated
// outcome. Each part applies where the strategy's own docs say (owner
// at its own keys, lease at a holder or owner, regionlease at a node of
// a key's region tier, the shares at every node).
type FastPath struct {
	// Buckets: the strategy lends a key's whole bucket, and every check
	// of it is decided in the caller's goroutine, admitted or refused
	// (strategy.BucketLender: local, central, static).
	Buckets bool
	// Allowances: checks are admitted from allowances of tokens the
	// node may decide alone (strategy.Allowancer).
	Allowances bool
	// Refusals: after a refusal the strategy names until when it will
	// refuse the key, and the driver refuses its checks until then
	// (strategy.Refuser: refusal windows, at most 5 ms each).
	Refusals bool
}

// FastPath reports what the live node's fast path does for the strategy
// (from the interfaces one instance built with probeConfig implements; the
// zero FastPath, every check through the loop, if that fails).
func (i Info) FastPath() FastPath {
	s, err := i.New(probeConfig())
	if err != nil {
		return FastPath{}
	}
	_, buckets := s.(strategy.BucketLender)
	_, allowances := s.(strategy.Allowancer)
	_, refusals := s.(strategy.Refuser)
	return FastPath{Buckets: buckets, Allowances: allowances, Refusals: refusals}
}

// probeConfig is the configuration Snapshots builds a strategy with to
// ask what it implements: one node, 1 token per second, burst 1, default
// parameters, a fixed seed.
func probeConfig() strategy.Config {
	return strategy.Config{Self: "n1", Members: []strategy.NodeID{"n1"}, Rate: bucket.Rate{Tokens: 1, Per: time.Second},
		Burst: 1, Rand: rand.New(rand.NewPCG(1, 1))}
}

// List returns every strategy, in the order reports show them: a copy,
// so a caller cannot change the registry.
func List() []Info { return slices.Clone(registry) }

// Names returns the strategy names in report order.
func Names() []string {
	out := make([]string, len(registry))
	for i, s := range registry {
		out[i] = s.Name
	}
	return out
}

// Lookup returns the strategy called name. The error lists the known names.
func Lookup(name string) (Info, error) {
	for _, s := range registry {
		if s.Name == name {
			return s, nil
		}
	}
	return Info{}, fmt.Errorf("unknown strategy %q (known: %s)", name, strings.Join(Names(), ", "))
}

// ParseList parses a comma-separated list of strategy names, or "all".
// central is always included (first), since every metric is relative to it.
// Errors: an unknown or repeated name, or an empty list.
func ParseList(list string) ([]Info, error) {
	if strings.TrimSpace(list) == "all" {
		var out []Info
		for _, s := range registry {
			if !s.NotInAll {
				out = append(out, s)
			}
		}
		return out, nil
	}
	out := []Info{registry[0]}
	seen := map[string]bool{"central": true}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		s, err := Lookup(name)
		if err != nil {
			return nil, err
		}
		if seen[name] {
			if name == "central" {
				continue
			}
			return nil, fmt.Errorf("strategy %q is listed twice", name)
		}
		seen[name] = true
		out = append(out, s)
	}
	return out, nil
}
