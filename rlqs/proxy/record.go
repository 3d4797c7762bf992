package proxy

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/tokenmesh/tokenmesh/rlqs/envoymodel"
	"github.com/tokenmesh/tokenmesh/workload"
)

// Times in a Record are since the fleet started (Start), on the monotonic
// clock; they are the times the proxies' models were called with.

// Decision is one offered request and its verdict.
type Decision struct {
	At      time.Duration
	Proxy   int
	Bucket  string // the bucket id's key (envoymodel.BucketID.Key)
	Allowed bool
	// Took is the wall time the proxy's model took to decide
	// (envoymodel.Proxy.Request): the decision's latency at the proxy,
	// without Envoy's request matching.
	Took time.Duration
}

// Assignment is one BucketAction a proxy received, and what it did.
type Assignment struct {
	At     time.Duration
	Proxy  int
	Addr   string // the server it came from
	Bucket string
	// Strategy is the quota assignment's rate_limit_strategy (a token
	// bucket, a blanket rule, ...); nil for an abandon_action or an
	// assignment without one.
	Strategy *typev3.RateLimitStrategy
	// TTL is assignment_time_to_live as received (Envoy uses its whole
	// seconds).
	TTL time.Duration
	// Effect is what the proxy's model did with it.
	Effect envoymodel.Effect
}

// TokenBucket is the assignment's token bucket, nil for other strategies.
func (a Assignment) TokenBucket() *typev3.TokenBucket { return a.Strategy.GetTokenBucket() }

// Report is one usage report a proxy built.
type Report struct {
	At      time.Duration
	Proxy   int
	Initial bool // a new bucket's report, sent at once (else periodic)
	Usage   *rlqsv3.RateLimitQuotaUsageReports
	// Addr is where it was sent; "" when it was dropped (no stream, or the
	// stream could not be opened or broke), as Envoy drops it.
	Addr string
	// Bytes is the report's protobuf size (gRPC adds 5 bytes of framing
	// per message).
	Bytes int
}

// Response is one RateLimitQuotaResponse a proxy received (applied, or
// refused by its model: then a BadResponse StreamEvent says why).
type Response struct {
	At      time.Duration
	Proxy   int
	Addr    string // the server it came from
	Actions int    // its bucket actions (each one an Assignment when applied)
	Bytes   int    // its protobuf size (gRPC adds 5 bytes of framing per message)
}

// StreamEvent is a change of a proxy's RLQS stream.
type StreamEvent struct {
	At    time.Duration
	Proxy int
	Addr  string
	Kind  StreamEventKind
	Err   string // why it failed or broke
}

// StreamEventKind is what happened to a stream.
type StreamEventKind uint8

const (
	Opened      StreamEventKind = iota // a stream was opened to Addr
	OpenFailed                         // the connection to Addr was not ready in time, or the stream not opened
	Broken                             // the stream to Addr ended (error or EOF)
	BadResponse                        // Addr sent a response the model refused (Err says why); it was ignored
)

func (k StreamEventKind) String() string {
	switch k {
	case Opened:
		return "opened"
	case OpenFailed:
		return "open-failed"
	case Broken:
		return "broken"
	case BadResponse:
		return "bad-response"
	}
	return fmt.Sprintf("StreamEventKind(%d)", uint8(k))
}

// Record is everything a fleet's proxies did, each list in time order.
type Record struct {
	Decisions   []Decision
	Assignments []Assignment
	Reports     []Report
	Responses   []Response
	Streams     []StreamEvent
}

// Workload returns the decisions as requests of one token each, keyed by
// bucket, in time order, and their verdicts: the input of
// eval.EnvelopeViolation (the most tokens of a bucket the whole fleet
// admitted in any window of length T beyond b + r*T).
func (r *Record) Workload() (reqs []workload.Request, allowed []bool) {
	for _, d := range r.Decisions {
		reqs = append(reqs, workload.Request{Arrival: d.At, Key: d.Bucket, Tokens: 1})
		allowed = append(allowed, d.Allowed)
	}
	return reqs, allowed
}

// Proxy returns the part of the record about proxy i.
func (r *Record) Proxy(i int) *Record {
	return &Record{
		Decisions:   only(r.Decisions, func(d Decision) bool { return d.Proxy == i }),
		Assignments: only(r.Assignments, func(a Assignment) bool { return a.Proxy == i }),
		Reports:     only(r.Reports, func(x Report) bool { return x.Proxy == i }),
		Responses:   only(r.Responses, func(x Response) bool { return x.Proxy == i }),
		Streams:     only(r.Streams, func(e StreamEvent) bool { return e.Proxy == i }),
	}
}

func only[T any](xs []T, keep func(T) bool) []T {
	var out []T
	for _, x := range xs {
		if keep(x) {
			out = append(out, x)
		}
	}
	return out
}

// Admitted counts the requests of bucket allowed in [from, to) by proxy
// (-1: by every proxy).
func (r *Record) Admitted(bucket string, proxy int, from, to time.Duration) int {
	n := 0
	for _, d := range r.Decisions {
		if d.Allowed && d.Bucket == bucket && (proxy < 0 || d.Proxy == proxy) && d.At >= from && d.At < to {
			n++
		}
	}
	return n
}

// recorder collects a Record from every proxy's goroutines.
type recorder struct {
	mu sync.Mutex
	r  Record
}

func (c *recorder) add(f func(r *Record)) {
	c.mu.Lock()
	f(&c.r)
	c.mu.Unlock()
}

// snapshot copies the record with every list sorted by time (stable: events
// of one proxy keep their order).
func (c *recorder) snapshot() *Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := &Record{
		Decisions:   slices.Clone(c.r.Decisions),
		Assignments: slices.Clone(c.r.Assignments),
		Reports:     slices.Clone(c.r.Reports),
		Responses:   slices.Clone(c.r.Responses),
		Streams:     slices.Clone(c.r.Streams),
	}
	slices.SortStableFunc(r.Decisions, func(a, b Decision) int { return cmp.Compare(a.At, b.At) })
	slices.SortStableFunc(r.Assignments, func(a, b Assignment) int { return cmp.Compare(a.At, b.At) })
	slices.SortStableFunc(r.Reports, func(a, b Report) int { return cmp.Compare(a.At, b.At) })
	slices.SortStableFunc(r.Responses, func(a, b Response) int { return cmp.Compare(a.At, b.At) })
	slices.SortStableFunc(r.Streams, func(a, b StreamEvent) int { return cmp.Compare(a.At, b.At) })
	return r
}
