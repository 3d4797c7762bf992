package main

import (
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/rlqs/envoymodel"
	"github.com/tokenmesh/tokenmesh/sim"
)

// proxyFlags are sim's proxy tier flags (sim.ProxyTier,
// eval.Options.Proxies): --proxies, --report-interval, --proxy-hop,
// --no-assignment-behavior, --expired-assignment-behavior.
type proxyFlags struct {
	proxies               int
	reportInterval, hop   time.Duration
	noAssignment, expired string
}

// maxProxies bounds --proxies (each proxy holds a bucket per key it saw).
const maxProxies = 10000

// add defines the proxy flags on fl.
func (f *proxyFlags) add(fl *pflag.FlagSet) {
	fl.IntVar(&f.proxies, "proxies", 0, "put N Envoy proxies between the trace and the cluster: --assign spreads requests over them, proxy i talks to node i mod --nodes; quota is served over RLQS (each proxy decides from its assignment), "+eval.ProxyStatic+" (in --strategies) is static at the proxies (Envoy's local_cluster_rate_limit), other strategies get one RLS check per request (0: none)")
	fl.DurationVar(&f.reportInterval, "report-interval", envoymodel.EnvoyReportInterval, "with --proxies: the RLQS proxies' usage report interval (today's Envoy: 5s whatever its config says); whole seconds, at least 1s")
	fl.DurationVar(&f.hop, "proxy-hop", sim.DefaultProxyHop, "with --proxies: the fixed one-way latency between a proxy and its node")
	fl.StringVar(&f.noAssignment, "no-assignment-behavior", string(sim.AllowAll), "with --proxies: what an RLQS proxy does for a bucket before its first assignment: ALLOW_ALL (Envoy's default) or DENY_ALL")
	fl.StringVar(&f.expired, "expired-assignment-behavior", string(sim.DenyAll), "with --proxies: what an RLQS proxy does for a bucket after its assignment expired: DENY_ALL (under which quota's bound holds) or ALLOW_ALL")
}

// apply checks the flags and puts the proxy tier into o; errors name the
// flag: a bad value, a proxy setting or proxystatic without --proxies,
// --client-latency with --proxies.
func (f *proxyFlags) apply(o *eval.Options) error {
	t := sim.ProxyTier{Proxies: f.proxies, ReportInterval: f.reportInterval, Hop: f.hop,
		NoAssignment: sim.Blanket(strings.ToUpper(f.noAssignment)), Expired: sim.Blanket(strings.ToUpper(f.expired))}
	def := sim.ProxyTier{ReportInterval: envoymodel.EnvoyReportInterval, Hop: sim.DefaultProxyHop, NoAssignment: sim.AllowAll, Expired: sim.DenyAll}
	switch {
	case f.proxies < 0 || f.proxies > maxProxies:
		return usageErr("--proxies %d: want 0 (none) to %d proxies", f.proxies, maxProxies)
	case f.reportInterval < time.Second || f.reportInterval%time.Second != 0:
		return usageErr("--report-interval %v: want whole seconds, at least 1s (Envoy reports time_elapsed in whole seconds)", f.reportInterval)
	case f.hop < 0:
		return usageErr("--proxy-hop %v: the latency must not be negative", f.hop)
	case t.NoAssignment != sim.AllowAll && t.NoAssignment != sim.DenyAll:
		return usageErr("--no-assignment-behavior %q: want ALLOW_ALL or DENY_ALL", f.noAssignment)
	case t.Expired != sim.AllowAll && t.Expired != sim.DenyAll:
		return usageErr("--expired-assignment-behavior %q: want DENY_ALL or ALLOW_ALL", f.expired)
	case f.proxies == 0 && t != def:
		return usageErr("--report-interval, --proxy-hop, --no-assignment-behavior and --expired-assignment-behavior need --proxies N")
	case f.proxies > 0 && o.ClientLatency != nil:
		return usageErr("--client-latency with --proxies: the proxies' --proxy-hop is the path from the clients to the nodes; give one")
	}
	for _, s := range o.Strategies {
		if s.Name == eval.ProxyStatic && f.proxies == 0 {
			return usageErr("--strategies %s: %s is static at the proxies; it needs --proxies N", eval.ProxyStatic, eval.ProxyStatic)
		}
	}
	o.Proxies = t
	return nil
}

// next is the steps after sim's recommendation rec with proxies: serve
// the pick (quota over RLQS, others over RLS; docs/RLQS.md, docs/ENVOY.md),
// or configure Envoy's own filter for proxystatic; replay has no proxies.
func (f *proxyFlags) next(rec *eval.Recommendation, opts eval.Options, burst int64) []eval.Step {
	registered := func(name string) string { return strings.Replace(name, eval.ProxyStatic, "static", 1) }
	switch {
	case rec.Strategy == "" && rec.Closest == "":
		return nil
	case rec.Strategy == "":
		return []eval.Step{eval.NoneMeetsStep(registered(rec.Closest), rec.Bounds)}
	case rec.Strategy == eval.ProxyStatic:
		return []eval.Step{{Why: "it is Envoy's own local_ratelimit filter with local_cluster_rate_limit: every Envoy enforces (r/N, b/N) alone, no tokenmesh needed; static is the same split over tokenmesh nodes",
			Command: "tokenmesh strategies static"}}
	}
	return []eval.Step{serveStep(rec.Strategy, opts.Params, opts.Rate, burst)}
}
