package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"

	"github.com/tokenmesh/tokenmesh/rlqs/envoymodel"
	"github.com/tokenmesh/tokenmesh/rlqs/quotamsg"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/host"
	"github.com/tokenmesh/tokenmesh/workload"
)

// ProxyTier is a tier of Envoy proxies between the trace and the cluster
// (Config.Proxies): Config.Assign spreads the requests over the
// proxies instead of the nodes, and each proxy i is attached to node
// i mod Nodes. What a proxy does depends on the rule's strategy:
//
//   - a strategy.Quoter (quota): the proxy is Envoy's rate_limit_quota
//     filter (rlqs/envoymodel): it decides every request from its bucket's
//     state at once, with no network (Outcome.Local), reports every
//     bucket's usage every ReportInterval (and a new bucket's first request
//     at once) to its node over its RLQS stream (host.Host.Usage), and
//     applies the assignments the node pushes (host.QuotaDriver), each
//     message one Hop late. A bucket is the request's key, bucket_id
//     {"key": KEY}; a request is one token (Envoy counts requests).
//   - any other strategy (owner, lease, ...): per-request RLS, as Envoy's
//     ratelimit filter: the proxy forwards every request to its node (one
//     Hop), which decides as without proxies (the request's arrival is its
//     arrival at the node), and the answer takes one Hop back. No request
//     is decided at the proxy (Outcome.Local false).
//   - AtProxies: the strategy runs at the proxies themselves, one instance
//     per proxy whose members are the proxies (p0, p1, ...), deciding
//     alone with no cluster behind: static there is Envoy's
//     local_cluster_rate_limit, (r/N, b/N) per proxy (eval's
//     `proxystatic`). Such a strategy must not need peers: the messages it
//     sends are counted lost.
//
// A proxy's stream (RLQS) or checks (RLS) go to its node while it is up.
// When the node crashes, its RLQS streams break at once
// (envoymodel.Proxy.StreamReset: assignments keep deciding until their
// TTL), and the proxy opens a new stream, to the next live node in index
// order, at its next report (Envoy restarts a closed stream only at its
// report timer); an RLS proxy sends its next check to the next live node.
// A proxy stays with the node it moved to. Messages in flight on a broken
// stream are lost. Partitions cut the cluster, not the proxies' links to
// their nodes, which lose, duplicate and reorder nothing (Config.Network
// is the peers'). Proxies' state is not in the state samples.
//
// The proxy<->node messages are counted in Result.ProxyMessages and
// ProxyBytes, at their protobuf sizes: RLQS usage reports
// (RateLimitQuotaUsageReports, one per report) and assignments
// (RateLimitQuotaResponse, one per assignment, as rlqs.Server sends
// them), or one RLS RateLimitRequest and RateLimitResponse per request
// (the smallest exchange: a domain and one descriptor entry, an overall
// code and one status; tokenmesh's answer also carries the limit and
// headers).
type ProxyTier struct {
	// Proxies is the number of proxies; 0: none, the requests reach the
	// nodes directly (every other field is then ignored).
	Proxies int
	// ReportInterval is the proxies' RLQS usage report interval; 0 is
	// today's Envoy, envoymodel.EnvoyReportInterval (5 s).
	ReportInterval time.Duration
	// Hop is the fixed one-way latency between a proxy and its node, for
	// every message (reports, assignments, checks and their answers);
	// >= 0. DefaultProxyHop is tokenmesh sim's default.
	Hop time.Duration
	// NoAssignment is what an RLQS proxy does for a bucket before its
	// first assignment (no_assignment_behavior): AllowAll, Envoy's when it
	// is unset ("" is AllowAll), or DenyAll.
	NoAssignment Blanket
	// Expired is what an RLQS proxy does for a bucket after its
	// assignment's TTL (expired_assignment_behavior's fallback_rate_limit,
	// for a year: longer than any run): DenyAll ("" is DenyAll, the
	// setting under which quota's bound holds), or AllowAll.
	Expired Blanket
	// AtProxies runs the strategy at the proxies instead of the nodes (see
	// above); it needs Proxies > 0.
	AtProxies bool
}

// Blanket is an RLQS blanket rule, a proxy's fallback (ProxyTier).
type Blanket string

const (
	AllowAll Blanket = "ALLOW_ALL"
	DenyAll  Blanket = "DENY_ALL"
)

// DefaultProxyHop is the proxy<->node latency tokenmesh sim uses unless
// told (--proxy-hop): a proxy next to its node.
const DefaultProxyHop = time.Millisecond

// expiredFor is how long the Expired fallback lasts (Envoy's
// expired_assignment_behavior_timeout, which must be > 0: after it the
// bucket returns to no_assignment_behavior).
const expiredFor = 365 * 24 * time.Hour

// proxyDomain is the RLQS and RLS domain of the proxies' messages.
const proxyDomain = "tokenmesh"

// bucketEntry is the bucket_id entry (and RLS descriptor key) that names a
// request's key.
const bucketEntry = "key"

// Resolved is t with its defaults filled in: ReportInterval 5 s,
// NoAssignment AllowAll, Expired DenyAll.
func (t ProxyTier) Resolved() ProxyTier {
	if t.ReportInterval == 0 {
		t.ReportInterval = envoymodel.EnvoyReportInterval
	}
	if t.NoAssignment == "" {
		t.NoAssignment = AllowAll
	}
	if t.Expired == "" {
		t.Expired = DenyAll
	}
	return t
}

// Validate reports a negative count, interval or hop, a blanket rule that
// is neither ALLOW_ALL nor DENY_ALL, and AtProxies without proxies.
func (t ProxyTier) Validate() error {
	switch {
	case t.Proxies < 0:
		return fmt.Errorf("sim: %d proxies; want 0 (none) or more", t.Proxies)
	case t.ReportInterval < 0:
		return fmt.Errorf("sim: proxy report interval %v is negative", t.ReportInterval)
	case t.Hop < 0:
		return fmt.Errorf("sim: proxy hop %v is negative", t.Hop)
	case t.AtProxies && t.Proxies == 0:
		return fmt.Errorf("sim: a strategy at the proxies needs proxies (ProxyTier.Proxies > 0)")
	}
	for _, b := range []struct {
		name string
		v    Blanket
	}{{"no_assignment", t.NoAssignment}, {"expired", t.Expired}} {
		if b.v != "" && b.v != AllowAll && b.v != DenyAll {
			return fmt.Errorf("sim: proxy %s behaviour %q; want %s or %s", b.name, b.v, AllowAll, DenyAll)
		}
	}
	return nil
}

// settings is the rate_limit_quota bucket settings of t's fallbacks.
func (t ProxyTier) settings() *rlqfilterv3.RateLimitQuotaBucketSettings {
	return envoymodel.BlanketSettings(t.ReportInterval, t.NoAssignment.Rule(), t.Expired.Rule(), expiredFor) // Envoy ignores the interval; the proto requires it
}

// Rule is b as the proto's blanket rule: DENY_ALL for DenyAll, ALLOW_ALL
// otherwise ("" is AllowAll).
func (b Blanket) Rule() typev3.RateLimitStrategy_BlanketRule {
	if b == DenyAll {
		return typev3.RateLimitStrategy_DENY_ALL
	}
	return typev3.RateLimitStrategy_ALLOW_ALL
}

// proxyMode is what the proxies do (ProxyTier's list).
type proxyMode uint8

const (
	proxyRLQS  proxyMode = iota // decide from assignments (a strategy.Quoter behind)
	proxyRLS                    // forward every request to the node
	proxyLocal                  // the strategy runs at the proxies (AtProxies)
)

// Proxy event kinds (event.pk), for prioProxy and prioProxyTimer events
// (event.node is the proxy).
const (
	pkToNode    int8 = iota // the proxy's oldest message in flight to its node arrives
	pkToProxy               // the oldest message in flight from its node arrives
	pkReport                // the proxy's report timer
	pkWake                  // a wake-up of the strategy at the proxy (proxyLocal)
	pkDelivered             // the node wrote the proxy's oldest unconfirmed assignment to its stream
)

// proxies is the run's proxy tier.
type proxies struct {
	cfg      ProxyTier // resolved
	mode     proxyMode
	all      []*proxy
	clients  map[strategy.QuotaClient]int // an open stream's client -> its proxy
	last     strategy.QuotaClient         // the last client number handed out
	received int                          // the proxy the last request went to
	ids      map[string]bucketID
	rlsReq   *rlsv3.RateLimitRequest // reused to size a check
	rlsResp  int64                   // the size of a check's answer
}

// bucketID is a key's RLQS bucket id, {"key": KEY}, as the model and the
// proto take it.
type bucketID struct {
	id envoymodel.BucketID
	pb *rlqsv3.BucketId
}

// proxy is one Envoy proxy.
type proxy struct {
	name   strategy.NodeID
	model  *envoymodel.Proxy // proxyRLQS
	h      *host.Host        // proxyLocal
	node   int               // the node its stream or checks go to
	client strategy.QuotaClient
	gen    uint32 // the stream's generation: messages of an older one are lost
	timed  bool   // a report timer event is queued
	// messages in flight, oldest first (the hop is fixed, so they arrive
	// in order)
	toNode, toProxy []proxyMsg
	// assignments its node wrote to its stream, to confirm to the node's
	// strategy (Quoter.Delivered) right after the write, oldest first
	written []proxyMsg
}

// proxyMsg is a message between a proxy and its node: a report, an
// assignment (its RLQS response and, for the delivery confirmation, the
// strategy's), or a forwarded request (trace index req >= 0).
type proxyMsg struct {
	gen    uint32
	req    int
	report *rlqsv3.RateLimitQuotaUsageReports
	assign *rlqsv3.RateLimitQuotaResponse
	quota  strategy.QuotaAssignment
}

// newProxies builds r's proxy tier (after the nodes: the mode depends on
// their strategy). Errors: a request of more than one token before RLQS
// proxies, or a strategy that cannot be built at a proxy.
func (r *runner) newProxies() error {
	t := r.cfg.Proxies.Resolved()
	px := &proxies{cfg: t, clients: map[strategy.QuotaClient]int{}, ids: map[string]bucketID{}}
	_, quoter := r.nodes[0].s.(strategy.Quoter)
	switch {
	case t.AtProxies:
		px.mode = proxyLocal
	case quoter:
		px.mode = proxyRLQS
		for i, req := range r.trace.Requests {
			if req.Tokens != 1 {
				return fmt.Errorf("sim: %s behind proxies: request %d asks %d tokens; RLQS proxies count requests, one token each", r.cfg.Name, i, req.Tokens)
			}
		}
	default:
		px.mode = proxyRLS
	}
	px.rlsReq = &rlsv3.RateLimitRequest{Domain: proxyDomain, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: bucketEntry}}}}}
	px.rlsResp = int64(proto.Size(&rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT,
		Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: rlsv3.RateLimitResponse_OVER_LIMIT}}}))
	names := make([]strategy.NodeID, t.Proxies)
	for i := range names {
		names[i] = strategy.NodeID(fmt.Sprintf("p%d", i))
	}
	r.px = px
	for i := range t.Proxies {
		p := &proxy{name: names[i], node: i % len(r.nodes)}
		px.all = append(px.all, p)
		var err error
		switch px.mode {
		case proxyRLQS:
			p.model, err = envoymodel.New(envoymodel.Config{Domain: proxyDomain, Settings: t.settings(), ReportInterval: t.ReportInterval})
		case proxyLocal:
			err = r.startAtProxy(i, names)
		}
		if err != nil {
			return fmt.Errorf("sim: proxy %s: %w", p.name, err)
		}
	}
	return nil
}

// startAtProxy builds and starts proxy i's strategy instance (proxyLocal):
// the rule's strategy with the proxies as members.
func (r *runner) startAtProxy(i int, members []strategy.NodeID) error {
	p := r.px.all[i]
	s, err := r.cfg.New(strategy.Config{
		Self: p.name, Members: slices.Clone(members), Rate: r.cfg.Rate, Burst: r.cfg.Burst,
		Rand:   rand.New(rand.NewPCG(r.cfg.Seed, 0x7078<<48|uint64(i))), // 'px': apart from the nodes' streams
		Params: r.cfg.Params, LatencyHint: r.cfg.Network.Latency.Hint(), Partition: r.cfg.Partition,
	})
	if err != nil {
		return fmt.Errorf("%s: %w", r.cfg.Name, err)
	}
	if p.h, err = host.New(p.name, 0, proxyDriver{r: r, i: i}, s); err != nil {
		return err
	}
	p.h.Start(0, 0)
	return nil
}

// bucket is key's bucket id (cached).
func (px *proxies) bucket(key string) bucketID {
	b, ok := px.ids[key]
	if !ok {
		b.id = envoymodel.NewBucketID(map[string]string{bucketEntry: key})
		b.pb = b.id.Proto()
		px.ids[key] = b
	}
	return b
}

// proxyRequest hands trace request i to the proxy the assigner picks.
func (r *runner) proxyRequest(i int, req *workload.Request) {
	px := r.px
	pi := r.cfg.Assign.Assign(req, i, len(px.all))
	p := px.all[pi]
	px.received = pi
	switch px.mode {
	case proxyRLQS:
		allowed, initial := p.model.Request(r.now, px.bucket(req.Key).id)
		r.res.Outcomes[i] = Outcome{Allowed: allowed, Decided: true, Local: true, Node: -1}
		if initial != nil {
			r.sendReport(pi, initial)
		}
		r.armReport(pi)
	case proxyRLS:
		px.rlsReq.Descriptors[0].Entries[0].Value = req.Key
		px.rlsReq.HitsAddend = 0
		if req.Tokens != 1 {
			px.rlsReq.HitsAddend = uint32(min(max(req.Tokens, 0), 1<<32-1))
		}
		r.pendingDecisions++ // until it reaches a node
		r.proxySend(pi, true, proxyMsg{req: i}, int64(proto.Size(px.rlsReq)))
	case proxyLocal:
		r.inCall = prioRequest
		sreq := strategy.Request{ID: uint64(i), Key: req.Key, Tokens: req.Tokens, Arrival: r.now}
		if r.cfg.Charges != nil {
			sreq.Charge = r.cfg.Charges[i]
		}
		p.h.RequestThen(r.now, 0, sreq, r.cfg.MaxWait, func(_ strategy.Strategy, d strategy.Decision, ok bool, _ *strategy.Effects) {
			if ok {
				r.record(d, true, false, -1)
			} else {
				r.pendingDecisions++
			}
		})
	}
}

// proxySend puts msg on the link between proxy pi and its node (toNode:
// towards the node), sized bytes, arriving one hop from now.
func (r *runner) proxySend(pi int, toNode bool, msg proxyMsg, bytes int64) {
	p := r.px.all[pi]
	r.res.ProxyMessages++
	r.res.ProxyBytes += bytes
	pk := pkToProxy
	if toNode {
		p.toNode = append(p.toNode, msg)
		pk = pkToNode
	} else {
		p.toProxy = append(p.toProxy, msg)
	}
	r.push(event{at: r.now + r.px.cfg.Hop, prio: prioProxy, pk: pk, node: int32(pi)})
}

// sendReport sends proxy pi's usage report rep over its stream, opening
// one to its node if it has none (Envoy starts the stream with the first
// bucket and restarts a broken one at its report timer). With no node up
// the report is lost and the stream stays down.
func (r *runner) sendReport(pi int, rep *rlqsv3.RateLimitQuotaUsageReports) {
	p := r.px.all[pi]
	if p.client == 0 {
		ni := r.proxyNode(p)
		if ni < 0 {
			p.model.StreamReset(r.now)
			return
		}
		r.px.last++
		p.client, p.gen = r.px.last, p.gen+1
		r.px.clients[p.client] = pi
	}
	r.proxySend(pi, true, proxyMsg{gen: p.gen, req: -1, report: rep}, int64(proto.Size(rep)))
}

// armReport queues proxy pi's next report timer, if its model has one and
// none is queued.
func (r *runner) armReport(pi int) {
	p := r.px.all[pi]
	if at, ok := p.model.NextReport(); ok && !p.timed {
		p.timed = true
		r.push(event{at: at, prio: prioProxyTimer, pk: pkReport, node: int32(pi)})
	}
}

// proxyNode is the node proxy p talks to: its node while that is up, else
// the next live node in index order, which it keeps; -1 when none is up.
func (r *runner) proxyNode(p *proxy) int {
	for k := range len(r.nodes) {
		if j := (p.node + k) % len(r.nodes); r.nodes[j].alive {
			p.node = j
			return j
		}
	}
	return -1
}

// proxyEvent runs a prioProxy or prioProxyTimer event of proxy e.node.
func (r *runner) proxyEvent(e event) {
	pi := int(e.node)
	p := r.px.all[pi]
	switch e.pk {
	case pkToNode:
		m := p.toNode[0]
		p.toNode = p.toNode[1:]
		r.atNode(pi, m)
	case pkToProxy:
		m := p.toProxy[0]
		p.toProxy = p.toProxy[1:]
		if m.gen != p.gen || p.client == 0 {
			return // the stream broke meanwhile
		}
		if _, err := p.model.Apply(r.now, m.assign); err != nil {
			r.res.ReceiveErrors++
		}
	case pkReport:
		p.timed = false
		r.sendReport(pi, p.model.Report(r.now))
		r.armReport(pi)
	case pkWake:
		r.inCall = prioWake
		p.h.Tick(r.now, 0)
	case pkDelivered:
		m := p.written[0]
		p.written = p.written[1:]
		if m.gen == p.gen && p.client != 0 {
			r.inCall = prioProxy
			r.nodes[p.node].h.Delivered(r.now, 0, m.quota)
		}
	}
}

// atNode delivers proxy pi's message m at its node: a forwarded request
// (to the live node the proxy talks to now), or a usage report, each
// bucket's usage handed to the node's strategy (lost if the stream broke
// meanwhile).
func (r *runner) atNode(pi int, m proxyMsg) {
	p := r.px.all[pi]
	if m.req >= 0 {
		r.pendingDecisions--
		if ni := r.proxyNode(p); ni >= 0 {
			r.injectAt(m.req, ni)
		}
		return
	}
	if m.gen != p.gen || p.client == 0 {
		return
	}
	n := r.nodes[p.node]
	r.inCall = prioProxy
	for _, u := range m.report.GetBucketQuotaUsages() {
		key := u.GetBucketId().GetBucket()[bucketEntry]
		if err := n.h.Usage(r.now, 0, quotamsg.Usage(p.client, key, u)); err != nil {
			r.res.ReceiveErrors++
		}
	}
}

// Assigned pushes an assignment of node i's strategy to its proxy over
// the proxy's stream (host.QuotaDriver), and confirms the write to the
// strategy at once (host.Host.Delivered, after this call: a driver must
// not call back into its Host), as rlqs.Server does after a successful
// write; one for a stream that has ended is dropped, as rlqs.Server
// drops it.
func (sd simDriver) Assigned(_ int, a strategy.QuotaAssignment) {
	r := sd.r
	if r.px == nil {
		return
	}
	pi, ok := r.px.clients[a.Client]
	p := r.px.all[pi]
	if !ok || p.client != a.Client || p.node != sd.i {
		return
	}
	resp := quotamsg.TokenBucket(r.px.bucket(a.Key).pb, a)
	m := proxyMsg{gen: p.gen, req: -1, assign: resp, quota: a}
	r.proxySend(pi, false, m, int64(proto.Size(resp)))
	p.written = append(p.written, m)
	r.push(event{at: r.now, prio: prioProxy, pk: pkDelivered, node: int32(pi)})
}

// proxiesLoseNode breaks the RLQS streams of the proxies attached to node
// i (it crashed): each proxy's model is told (assignments decide until
// their TTL), and its next report opens a stream to a live node.
func (r *runner) proxiesLoseNode(i int) {
	if r.px == nil || r.px.mode != proxyRLQS {
		return
	}
	for _, p := range r.px.all {
		if p.node == i && p.client != 0 {
			p.model.StreamReset(r.now)
			delete(r.px.clients, p.client)
			p.client, p.gen = 0, p.gen+1
		}
	}
}

// proxyDriver is proxy i's host.Driver when the strategy runs at the
// proxies (proxyLocal): decisions are recorded, wake-ups queued, and
// messages lost (the proxies have no network between them).
type proxyDriver struct {
	r *runner
	i int
}

// Decided records an asynchronous decision of a request the proxy holds.
func (pd proxyDriver) Decided(_ int, d strategy.Decision) {
	r := pd.r
	if d.RequestID < uint64(len(r.res.Outcomes)) && !r.res.Outcomes[d.RequestID].Decided {
		r.record(d, true, false, -1)
		r.pendingDecisions--
	}
}

// Send counts the message sent and lost.
func (pd proxyDriver) Send(int, strategy.NodeID, []byte) {
	pd.r.res.Messages++
	pd.r.res.MessagesLost++
}

// Schedule queues a wake-up of the proxy's strategy.
func (pd proxyDriver) Schedule(_ int, at time.Duration) {
	pd.r.push(event{at: at, prio: prioProxyTimer, pk: pkWake, node: int32(pd.i)})
}
