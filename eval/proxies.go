package eval

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tokenmesh/tokenmesh/sim"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
)

// This file is the evaluation behind a tier of Envoy proxies (Options.Proxies,
// sim.ProxyTier): every strategy but central (the
// reference, one bucket, no proxies) runs behind the same proxies, and the
// report counts their traffic to the nodes with the peers'.

// ProxyStatic is the name, in reports and --strategies, of Envoy's own
// local_cluster_rate_limit: the static strategy run at the proxies, each
// enforcing (r/N, b/N) of N proxies alone (sim.ProxyTier.AtProxies), with
// no cluster behind. Only with proxies.
const ProxyStatic = "proxystatic"

// ProxyStaticInfo is ProxyStatic as a strategy of Options.Strategies:
// static's constructor and parameters under that name.
func ProxyStaticInfo() registry.Info {
	s, err := registry.Lookup("static")
	if err != nil {
		panic(err) // static is registered
	}
	s.Name = ProxyStatic
	s.Summary = "static at the proxy tier: each of N proxies enforces (r/N, b/N) alone, Envoy's local_cluster_rate_limit (only with proxies)"
	return s
}

// ParseStrategies is registry.ParseList that also takes ProxyStatic (appended
// last, once). Errors: registry.ParseList's, and ProxyStatic listed twice.
func ParseStrategies(list string) ([]registry.Info, error) {
	var rest []string
	static := 0
	for _, name := range strings.Split(list, ",") {
		if strings.TrimSpace(name) == ProxyStatic {
			static++
			continue
		}
		rest = append(rest, name)
	}
	if static > 1 {
		return nil, fmt.Errorf("strategy %q is listed twice", ProxyStatic)
	}
	out, err := registry.ParseList(strings.Join(rest, ","))
	if err != nil || static == 0 {
		return out, err
	}
	return append(out, ProxyStaticInfo()), nil
}

// ProxySetup is Setup.Proxies: the proxy tier of the run (sim.ProxyTier,
// its defaults filled in).
type ProxySetup struct {
	Proxies         int     `json:"proxies"`
	ReportIntervalS float64 `json:"report_interval_s"`
	HopMs           float64 `json:"hop_ms"`
	// NoAssignment and Expired are the RLQS proxies' fallbacks
	// (no_assignment_behavior, expired_assignment_behavior): ALLOW_ALL or
	// DENY_ALL.
	NoAssignment string `json:"no_assignment"`
	Expired      string `json:"expired_assignment"`
}

// ProxyCosts is Result.Proxy: the traffic between a strategy's proxies
// and their nodes (sim.Result.ProxyMessages, ProxyBytes) and the messages
// per request, peer and proxy messages together.
type ProxyCosts struct {
	Messages           int64   `json:"messages"`
	Bytes              int64   `json:"bytes"`
	MessagesPerRequest float64 `json:"messages_per_request"`
}

// proxySetup is the report's ProxySetup of t (nil without proxies).
func proxySetup(t sim.ProxyTier) *ProxySetup {
	if t.Proxies == 0 {
		return nil
	}
	t = t.Resolved()
	return &ProxySetup{Proxies: t.Proxies, ReportIntervalS: t.ReportInterval.Seconds(), HopMs: ms(t.Hop),
		NoAssignment: string(t.NoAssignment), Expired: string(t.Expired)}
}

// proxyTier is the proxy tier strategy s runs behind in opts: none for
// central (the reference), the strategy at the proxies for ProxyStatic.
// Errors: ProxyStatic without proxies.
func proxyTier(opts Options, s registry.Info) (sim.ProxyTier, error) {
	if s.Name == ProxyStatic && opts.Proxies.Proxies == 0 {
		return sim.ProxyTier{}, fmt.Errorf("eval: %s is static at the proxies: it needs proxies (--proxies N)", ProxyStatic)
	}
	if s.Centralized {
		return sim.ProxyTier{}, nil
	}
	t := opts.Proxies
	t.AtProxies = s.Name == ProxyStatic
	return t, nil
}

// proxyCosts fills r's proxy costs from res, when the run had proxies:
// Proxy, and bytes per request counting the proxies' bytes too.
func proxyCosts(r *Result, res *sim.Result, t sim.ProxyTier) {
	if t.Proxies == 0 || r.Requests == 0 {
		return
	}
	n := float64(r.Requests)
	r.Proxy = &ProxyCosts{Messages: res.ProxyMessages, Bytes: res.ProxyBytes,
		MessagesPerRequest: round(float64(res.Messages+res.ProxyMessages)/n, 2)}
	r.BytesPerRequest = round(float64(res.Bytes+res.ProxyBytes)/n, 1)
}

// proxyFact is the setup line's description of the proxy tier.
func proxyFact(p *ProxySetup) [2]string {
	return [2]string{"proxies", strconv.Itoa(p.Proxies) + " (RLQS reports every " + num(p.ReportIntervalS) + " s, hop " + num(p.HopMs) +
		" ms, no_assignment " + p.NoAssignment + ", expired " + p.Expired + ")"}
}

// proxyNote is the report's note on what the proxies do.
func proxyNote(p *ProxySetup) string {
	return fmt.Sprintf("proxies: requests reach %d Envoy proxies by the assignment policy; proxy i talks to node i mod nodes "+
		"(the next live node after a crash). quota is served over RLQS: each proxy decides from its own token-bucket assignment "+
		"(rlqs/envoymodel), reports every %s s and gets assignments from its node; %s is static at the proxies (Envoy's "+
		"local_cluster_rate_limit, no cluster); every other strategy is per-request RLS: each request is forwarded to the proxy's "+
		"node, which decides (a hop of %s ms each way). local %% counts the requests decided at their proxy; central runs without proxies",
		p.Proxies, num(p.ReportIntervalS), ProxyStatic, num(p.HopMs))
}

// proxyDefs replace the legend's last two entries (local %, B/req) with
// proxies, and explain the proxy columns.
var proxyDefs = []metricDef{
	{"local %", "requests decided at their proxy, with no network (RLQS proxies, " + ProxyStatic + "), as % of all; per-request RLS proxies decide none"},
	{"B/req", "peer and proxy<->node payload bytes per request"},
	{"proxy msgs, B", "messages between the proxies and their nodes and their protobuf bytes: RLQS usage reports and assignments, or an RLS check and its answer per request"},
	{"msgs/req", "peer and proxy<->node messages per request"},
}

// proxyColumns are the results table's proxy columns (with proxies):
// blank for central, which runs without them.
func proxyColumns() []column {
	cell := func(v func(*ProxyCosts) string) func(Result) string {
		return func(r Result) string {
			if r.Proxy == nil {
				return ""
			}
			return v(r.Proxy)
		}
	}
	return []column{
		{"proxy msgs", "proxy", 2, cell(func(p *ProxyCosts) string { return strconv.FormatInt(p.Messages, 10) })},
		{"proxy B", "proxy", 2, cell(func(p *ProxyCosts) string { return humanBytes(p.Bytes) })},
		{"msgs/req", "proxy", 2, cell(func(p *ProxyCosts) string { return strconv.FormatFloat(p.MessagesPerRequest, 'f', 2, 64) })},
	}
}
