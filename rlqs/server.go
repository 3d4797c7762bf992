// Package rlqs serves Envoy's Rate Limit Quota Service (RLQS,
// envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas)
// on a tokenmesh node: each Envoy stream is a quota client of the node
// (cluster.Node.NewQuotaClient); its usage reports go to the rule of the
// bucket's limit, whose strategy (quota) sizes a token-bucket assignment
// for it from its demand out of the key's one (r, b); the assignments come
// back through the node's quota sink and are pushed on the stream.
//
// Limits come from envoyproxy/ratelimit's YAML (envoyrls.Config, the same
// files as the RLS drop-in): the stream's domain is a file's domain, a
// bucket_id matches the descriptor tree (envoyrls.MatchBucket), and the
// matched descriptor's rule and key are the RLS ones, so RLS and RLQS
// checks of one descriptor draw on one bucket. A bucket that matches no
// limit, or an unlimited one, is answered ALLOW_ALL once; a limit whose
// rule's strategy is not quota is answered nothing (Envoy keeps its
// no_assignment_behavior) and counted (tokenmesh_rlqs_buckets_unserved).
//
// Bad input gets a gRPC status naming it and ends the stream: a report
// with no domain on a new stream or an unknown domain (NotFound), a change
// of domain (InvalidArgument), more than MaxBucketsPerStream distinct buckets (ResourceExhausted). Envoy's
// first report of a bucket has time_elapsed 0, which the proto's own
// validation refuses; it is taken as it is (Envoy sends 0 for any report
// less than a second after the previous one: such a report leaves the
// demand estimate as it is). A report with an empty bucket id (Envoy makes
// one when no bucket_id_builder applies) is skipped and counted in
// tokenmesh_rlqs_refused_total{code="empty_bucket_id"}, not a reason to
// end the stream.
//
// A stream may name its client: the tokenmesh-client-id header
// (quotamsg.ClientIDHeader; one value of at most
// strategy.MaxQuotaClientIDBytes of UTF-8, else InvalidArgument), which
// operators set per Envoy in the filter's grpc_service.initial_metadata.
// It goes with every report (strategy.QuotaUsage.ID): the quota strategy
// lets a new stream with the id of a share whose node left take that share
// over (strategy/quota, # Client ids), and Drain does not expire such a
// stream's buckets.
//
// Ours: the package; the protocol is Envoy's (api/envoy/service/
// rate_limit_quota/v3/rlqs.proto).
package rlqs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tokenmesh/tokenmesh/envoyrls"
	"github.com/tokenmesh/tokenmesh/internal/logthrottle"
	"github.com/tokenmesh/tokenmesh/rlqs/envoymodel"
	"github.com/tokenmesh/tokenmesh/rlqs/quotamsg"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/host"
)

// ServiceName is the gRPC service's full name (as the health service
// reports it).
const ServiceName = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService"

// MaxBucketsPerStream bounds the distinct bucket ids one stream may report
// (a flood of ids must not grow the node's memory without limit).
const MaxBucketsPerStream = 10000

// MaxBucketIDBytes bounds one bucket id's keys and values together.
const MaxBucketIDBytes = 4096

// outQueue is how many responses may wait for a slow stream; a stream
// whose queue is full is ended (its Envoy reconnects), since a dropped cut
// would let it hold a share beyond the bound.
const outQueue = 1024

// Node is what the server needs of a tokenmesh node (cluster.Node).
type Node interface {
	NewQuotaClient() strategy.QuotaClient
	QuotaUsage(ctx context.Context, rule string, u strategy.QuotaUsage) error
	QuotaDetach(ctx context.Context, rule string, client strategy.QuotaClient, key string) error
	QuotaDelivered(ctx context.Context, rule string, a strategy.QuotaAssignment) error
}

// Server is the RLQS service of one node. Build it with New; register it
// on a gRPC server with Register; hand its Assigned to the node's quota
// sink (cluster.Node.SetQuotaSink).
type Server struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	node    Node
	cfg     atomic.Pointer[envoyrls.Config]
	log     *slog.Logger
	mu      sync.Mutex
	streams map[strategy.QuotaClient]*stream
	m       metrics
	closing chan struct{} // closed by Close: every stream ends
	once    sync.Once
	// unservedLog throttles the lines about unserved buckets, per rule.
	unservedLog logthrottle.Throttle
}

type stream struct {
	client   strategy.QuotaClient
	id       string // the client's id (quotamsg.ClientIDHeader); "" none
	domain   string
	out      chan outMsg
	full     chan struct{} // closed when out overflowed
	fullOnce sync.Once
	mu       sync.Mutex
	buckets  map[string]*bucket // by canonical bucket id
	byKey    map[ruleKey]*bucket
}

type ruleKey struct{ rule, key string }

// outMsg is a response queued for a stream; a token-bucket assignment
// carries its rule and assignment, confirmed to the node once written
// (Node.QuotaDelivered: what a cut freed is then released sooner).
type outMsg struct {
	resp *rlqsv3.RateLimitQuotaResponse
	rule string
	a    *strategy.QuotaAssignment
}

type bucket struct {
	canon    string // its key in stream.buckets
	id       *rlqsv3.BucketId
	rule     string // "" for a bucket with no limit
	key      string
	assigned bool // an assignment (or ALLOW_ALL) was sent
}

type metrics struct {
	streams  prometheus.Gauge
	buckets  prometheus.Gauge
	reports  prometheus.Counter
	sent     *prometheus.CounterVec
	unserved prometheus.Counter
	refused  *prometheus.CounterVec
}

// New returns the server of node with the limits of cfg. reg, when not
// nil, gets the server's metrics (tokenmesh_rlqs_*). Errors: a nil node
// or config, a metric already registered.
func New(node Node, cfg *envoyrls.Config, log *slog.Logger, reg prometheus.Registerer) (*Server, error) {
	if node == nil || cfg == nil {
		return nil, errors.New("rlqs: node and config are required")
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Server{node: node, log: log, streams: map[strategy.QuotaClient]*stream{}, closing: make(chan struct{}),
		unservedLog: logthrottle.Throttle{Every: UnservedLogEvery}}
	s.cfg.Store(cfg)
	s.m = metrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tokenmesh_rlqs_streams", Help: "Open RLQS streams (one per Envoy quota client)."}),
		buckets: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tokenmesh_rlqs_buckets", Help: "Buckets subscribed by the open RLQS streams."}),
		reports: prometheus.NewCounter(prometheus.CounterOpts{Name: "tokenmesh_rlqs_reports_total", Help: "Bucket usage reports received."}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tokenmesh_rlqs_assignments_total",
			Help: "Bucket actions sent, by kind: token_bucket (changed or renewed), deny_all (while a share is unpaid), abandon (an idle bucket taken back), allow_all (no limit), expire (TTL 0 before a drain)."}, []string{"kind"}),
		unserved: prometheus.NewCounter(prometheus.CounterOpts{Name: "tokenmesh_rlqs_buckets_unserved_total",
			Help: "Reports for buckets whose limit's rule is not a quota rule (answered nothing)."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tokenmesh_rlqs_refused_total",
			Help: "Streams ended for bad input, by gRPC code; and bucket reports skipped (code empty_bucket_id)."}, []string{"code"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{s.m.streams, s.m.buckets, s.m.reports, s.m.sent, s.m.unserved, s.m.refused} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("rlqs: metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Register adds the service to g.
func (s *Server) Register(g grpc.ServiceRegistrar) { rlqsv3.RegisterRateLimitQuotaServiceServer(g, s) }

// SetConfig replaces the limits (a reload). Open streams keep the rules
// their buckets matched until they report again under the new ones.
func (s *Server) SetConfig(cfg *envoyrls.Config) {
	if cfg != nil {
		s.cfg.Store(cfg)
	}
}

// Assigned pushes an assignment of rule's strategy to its client's stream
// (the node's quota sink: called from the node's goroutine, never blocks).
func (s *Server) Assigned(rule string, a strategy.QuotaAssignment) {
	s.mu.Lock()
	st := s.streams[a.Client]
	s.mu.Unlock()
	if st == nil {
		return
	}
	st.mu.Lock()
	b := st.byKey[ruleKey{rule, a.Key}]
	if b != nil {
		b.assigned = true
		if a.Abandon {
			// Envoy forgets it: its next report is a new bucket's
			delete(st.byKey, ruleKey{rule, a.Key})
			delete(st.buckets, b.canon)
			s.m.buckets.Dec()
		}
	}
	st.mu.Unlock()
	if b == nil {
		return
	}
	kind := "token_bucket"
	switch {
	case a.Abandon:
		kind = "abandon"
	case a.DenyAll():
		kind = "deny_all"
	}
	s.m.sent.WithLabelValues(kind).Inc()
	st.send(outMsg{resp: quotamsg.TokenBucket(b.id, a), rule: rule, a: &a})
}

// send queues r for the stream; a full queue ends the stream.
func (st *stream) send(r outMsg) {
	select {
	case st.out <- r:
	default:
		st.fullOnce.Do(func() { close(st.full) })
	}
}

// Drain sends every bucket of every open stream an assignment with TTL 0,
// so that their Envoys fall back to their expired_assignment_behavior
// instead of holding shares this node can no longer renew (before the
// node leaves), but the streams with a client id (quotamsg.ClientIDHeader),
// whose shares their next streams take over. It returns the number of
// buckets expired.
func (s *Server) Drain() int {
	s.mu.Lock()
	streams := make([]*stream, 0, len(s.streams))
	for _, st := range s.streams {
		streams = append(streams, st)
	}
	s.mu.Unlock()
	n := 0
	for _, st := range streams {
		if st.id != "" {
			// A client with an id keeps its assignments: on its next
			// stream (at another node) the key's owner sends them again
			// as they are, once this node has left (strategy/quota #
			// Client ids); an expiry here would make that resend a first
			// token bucket, which Envoy starts full.
			continue
		}
		st.mu.Lock()
		for _, b := range st.buckets {
			if b.rule != "" && b.assigned {
				st.send(outMsg{resp: quotamsg.Action(b.id, durationpb.New(0), nil)})
				n++
			}
		}
		st.mu.Unlock()
	}
	s.m.sent.WithLabelValues("expire").Add(float64(n))
	return n
}

// Close ends every stream (Unavailable: their Envoys reconnect to another
// node) after sending what is queued (Drain's expiries), and refuses new
// ones. Call Drain first.
func (s *Server) Close() { s.once.Do(func() { close(s.closing) }) }

// StreamRateLimitQuotas serves one Envoy's stream.
func (s *Server) StreamRateLimitQuotas(gs grpc.BidiStreamingServer[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]) error {
	ctx := gs.Context()
	st, err := s.newStream(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.streams[st.client] = st
	s.mu.Unlock()
	s.m.streams.Inc()
	defer func() {
		s.mu.Lock()
		delete(s.streams, st.client)
		s.mu.Unlock()
		s.m.streams.Dec()
		st.mu.Lock()
		s.m.buckets.Sub(float64(len(st.buckets)))
		rules := map[string]bool{}
		for rk := range st.byKey {
			rules[rk.rule] = true
		}
		st.mu.Unlock()
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for r := range rules {
			_ = s.node.QuotaDetach(dctx, r, st.client, "")
		}
	}()
	errc := make(chan error, 1)
	go func() { errc <- s.recv(ctx, gs, st) }()
	for {
		select {
		case err := <-errc:
			if code := status.Code(err); err != nil && code != codes.Canceled {
				s.m.refused.WithLabelValues(code.String()).Inc()
				s.log.Warn("rlqs: stream ended", "client", uint64(st.client), "client_id", st.id, "domain", st.domain, "error", err.Error())
			}
			return err
		case r := <-st.out:
			if err := s.write(ctx, gs, r); err != nil {
				return err
			}
		case <-s.closing:
			// what Drain queued goes out first
			for {
				select {
				case r := <-st.out:
					if err := s.write(ctx, gs, r); err != nil {
						return err
					}
					continue
				default:
				}
				break
			}
			return status.Error(codes.Unavailable, "rlqs: the node is shutting down; reconnect to another node")
		case <-st.full:
			err := status.Error(codes.ResourceExhausted, "rlqs: the stream does not read its assignments fast enough; reconnect")
			s.m.refused.WithLabelValues(codes.ResourceExhausted.String()).Inc()
			return err
		}
	}
}

// newStream is a new stream's state: a new quota client of the node, with
// the client id of the stream's metadata. Errors: the server is closing
// (Unavailable), a bad client id header (clientID; counted).
func (s *Server) newStream(ctx context.Context) (*stream, error) {
	select {
	case <-s.closing:
		return nil, status.Error(codes.Unavailable, "rlqs: the node is shutting down; connect to another node")
	default:
	}
	id, err := clientID(ctx)
	if err != nil {
		s.m.refused.WithLabelValues(codes.InvalidArgument.String()).Inc()
		return nil, err
	}
	return &stream{client: s.node.NewQuotaClient(), id: id, out: make(chan outMsg, outQueue), full: make(chan struct{}),
		buckets: map[string]*bucket{}, byKey: map[ruleKey]*bucket{}}, nil
}

// write sends r on the stream and, for an assignment, confirms it to the
// node.
func (s *Server) write(ctx context.Context, gs grpc.BidiStreamingServer[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse], r outMsg) error {
	if err := gs.Send(r.resp); err != nil {
		return err
	}
	if r.a != nil {
		if err := s.node.QuotaDelivered(ctx, r.rule, *r.a); err != nil && ctx.Err() == nil {
			s.log.Debug("rlqs: delivery not confirmed", "rule", r.rule, "error", err.Error())
		}
	}
	return nil
}

// recv reads reports until the stream ends or one is bad.
func (s *Server) recv(ctx context.Context, gs grpc.BidiStreamingServer[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse], st *stream) error {
	for {
		m, err := gs.Recv()
		if err != nil {
			return err
		}
		if err := s.reports(ctx, st, m); err != nil {
			return err
		}
	}
}

// reports handles one message of reports.
func (s *Server) reports(ctx context.Context, st *stream, m *rlqsv3.RateLimitQuotaUsageReports) error {
	cfg := s.cfg.Load()
	switch {
	case st.domain == "" && m.Domain == "":
		return status.Error(codes.InvalidArgument, "rlqs: the first report of a stream must name its domain")
	case st.domain == "":
		if cfg.Domains[m.Domain] == nil {
			return status.Errorf(codes.NotFound, "rlqs: unknown domain %q (no envoy config file has it)", m.Domain)
		}
		st.domain = m.Domain
	case m.Domain != "" && m.Domain != st.domain:
		return status.Errorf(codes.InvalidArgument, "rlqs: domain %q on a stream of domain %q: open a new stream to change domains", m.Domain, st.domain)
	}
	for i, u := range m.BucketQuotaUsages {
		if err := s.report(ctx, cfg, st, u); err != nil {
			return status.Errorf(status.Code(err), "rlqs: bucket_quota_usages[%d]: %s", i, status.Convert(err).Message())
		}
	}
	return nil
}

// report handles one bucket's usage: an empty bucket id is skipped
// (counted), a bucket of no rule gets ALLOW_ALL once, any other's usage
// goes to the node's strategy. Errors (a gRPC status): a bucket id above
// MaxBucketIDBytes, more than MaxBucketsPerStream buckets, a usage out of
// bounds (checkUsage), ctx's end.
func (s *Server) report(ctx context.Context, cfg *envoyrls.Config, st *stream, u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) error {
	s.m.reports.Inc()
	id := u.GetBucketId().GetBucket()
	if len(id) == 0 {
		// Envoy builds one when no bucket_id_builder applies: it is
		// skipped (counted), not a reason to end the stream, which would
		// take every other bucket of that Envoy with it.
		s.m.refused.WithLabelValues("empty_bucket_id").Inc()
		return nil
	}
	b, first, err := s.bucketOf(cfg, st, u.GetBucketId())
	if err != nil {
		return err
	}
	if b.rule == "" {
		if first {
			s.m.sent.WithLabelValues("allow_all").Inc()
			st.send(outMsg{resp: quotamsg.Action(b.id, nil, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_ALLOW_ALL}})})
		}
		return nil
	}
	if err := checkUsage(u); err != nil {
		return err
	}
	return s.forwardUsage(ctx, st, b, u)
}

// bucketOf is st's bucket of the (non-empty) bucket id bid, made and
// matched to its rule and key under cfg on its first report; first says
// the bucket has no rule and this is the first time it is asked for (its
// ALLOW_ALL is due). Errors: bid above MaxBucketIDBytes
// (InvalidArgument), a new bucket beyond MaxBucketsPerStream
// (ResourceExhausted).
func (s *Server) bucketOf(cfg *envoyrls.Config, st *stream, bid *rlqsv3.BucketId) (b *bucket, first bool, err error) {
	id := bid.GetBucket()
	canon, size := canonical(id)
	if size > MaxBucketIDBytes {
		return nil, false, status.Errorf(codes.InvalidArgument, "bucket_id of %d bytes is above the limit of %d", size, MaxBucketIDBytes)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	b = st.buckets[canon]
	if b == nil {
		if len(st.buckets) >= MaxBucketsPerStream {
			return nil, false, status.Errorf(codes.ResourceExhausted, "more than %d buckets on one stream", MaxBucketsPerStream)
		}
		b = &bucket{canon: canon, id: bid}
		if l, key := cfg.MatchBucket(st.domain, id); l != nil && l.Rule != "" && !l.Unlimited {
			b.rule, b.key = l.Rule, key
			st.byKey[ruleKey{b.rule, b.key}] = b
		}
		st.buckets[canon] = b
		s.m.buckets.Inc()
	}
	first = b.rule == "" && !b.assigned
	if first {
		b.assigned = true
	}
	return b, first, nil
}

// checkUsage checks a usage report's bounds: time_elapsed in [0,
// strategy.MaxQuotaElapsed], the requests allowed and denied at most
// strategy.MaxQuotaReport each. Errors: InvalidArgument naming the field.
func checkUsage(u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) error {
	elapsed := u.GetTimeElapsed().AsDuration()
	if elapsed < 0 || elapsed > strategy.MaxQuotaElapsed {
		return status.Errorf(codes.InvalidArgument, "time_elapsed %v outside [0, %v]", elapsed, strategy.MaxQuotaElapsed)
	}
	if u.NumRequestsAllowed > strategy.MaxQuotaReport || u.NumRequestsDenied > strategy.MaxQuotaReport {
		return status.Errorf(codes.InvalidArgument, "num_requests_allowed %d / denied %d above %d", u.NumRequestsAllowed, u.NumRequestsDenied, int64(strategy.MaxQuotaReport))
	}
	return nil
}

// forwardUsage hands the usage u of b, a bucket of a rule, to the node's
// strategy. A usage the node does not serve is counted and logged
// (logUnserved), not an error; the error is ctx's end only.
func (s *Server) forwardUsage(ctx context.Context, st *stream, b *bucket, u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) error {
	qu := quotamsg.Usage(st.client, b.key, u)
	qu.ID = st.id
	if err := s.node.QuotaUsage(ctx, b.rule, qu); err != nil {
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
		s.m.unserved.Inc()
		s.logUnserved(st.domain, b, err)
	}
	return nil
}

// UnservedLogEvery is the least time between two log lines about the
// unserved buckets of one rule.
const UnservedLogEvery = time.Minute

// logUnserved tells the operator, at Warn and at most once per rule per
// UnservedLogEvery, why a bucket gets no assignment: most often its
// descriptor's rule has a strategy that serves no quota clients (a file
// without the tokenmesh extension: strategy owner), which Envoy shows
// only as its no_assignment_behavior.
func (s *Server) logUnserved(domain string, b *bucket, err error) {
	suppressed, ok := s.unservedLog.Allow(b.rule)
	if !ok {
		return
	}
	hint := ""
	if errors.Is(err, host.ErrNotQuoter) {
		hint = "RLQS assigns shares of rules whose strategy is quota: add `tokenmesh: {strategy: quota}` to the descriptor (docs/RLQS.md); Envoy decides this bucket from its no_assignment_behavior meanwhile"
	}
	s.log.Warn("rlqs: bucket not served", "domain", domain, "bucket", b.canon, "rule", b.rule, "error", err.Error(),
		"hint", hint, "suppressed_since_last_line", suppressed)
}

// clientID is the stream's client id: the one value of
// quotamsg.ClientIDHeader in its metadata, "" without the header. Errors
// (InvalidArgument): the header more than once, or a value longer than
// strategy.MaxQuotaClientIDBytes or not valid UTF-8.
func clientID(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vs := md.Get(quotamsg.ClientIDHeader)
	switch {
	case len(vs) == 0:
		return "", nil
	case len(vs) > 1:
		return "", status.Errorf(codes.InvalidArgument, "rlqs: %d values of the %s header; give one per stream", len(vs), quotamsg.ClientIDHeader)
	case len(vs[0]) > strategy.MaxQuotaClientIDBytes || !utf8.ValidString(vs[0]):
		return "", status.Errorf(codes.InvalidArgument, "rlqs: the %s header has %d bytes (at most %d of UTF-8)", quotamsg.ClientIDHeader, len(vs[0]), strategy.MaxQuotaClientIDBytes)
	}
	return vs[0], nil
}

// canonical is a bucket id as one string (envoymodel.BucketID's key, the
// one the emulated Envoy and the simulator use) and the bytes of its keys
// and values.
func canonical(id map[string]string) (string, int) {
	size := 0
	for k, v := range id {
		size += len(k) + len(v)
	}
	return envoymodel.NewBucketID(id).Key(), size
}
