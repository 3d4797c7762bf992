package loadgen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"google.golang.org/grpc"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
)

// runWorker is one worker's loop.
func runWorker(ctx context.Context, o *Options, w int, conns [][]*grpc.ClientConn, keys *keyPicker,
	start, measureStart, end time.Time, quota int64) workerStats {
	st := workerStats{hist: hdrhistogram.New(histMin, histMax, histDigits)}
	rng := rand.New(rand.NewPCG(o.Seed, uint64(w)))
	c := newCaller(o)
	ti := w % len(conns)
	ci := w % len(conns[0])
	p := newPacer(o, w, start, end)
	for i := int64(0); quota == 0 || i < quota; i++ {
		if ctx.Err() != nil {
			break
		}
		sent, ok := p.due(i)
		if !ok {
			break
		}
		err := c.call(ctx, conns[ti][ci], keys, rng)
		done := time.Now()
		if ti++; ti == len(conns) {
			ti = 0
		}
		if done.Before(measureStart) {
			if o.RecordAdmissions && err == nil {
				var scratch workerStats // the warmup's counts are not kept
				if _, _, _, bad := c.tally(o.Batch, &scratch); bad == "" {
					c.record(&st, done.Sub(measureStart), o.Hits, false)
				}
			}
			continue
		}
		if done.After(end) {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			st.failed++
			st.sample(err.Error())
			continue
		}
		allowed, refused, errs, bad := c.tally(o.Batch, &st)
		if bad != "" {
			st.failed++
			st.sample(bad)
			continue
		}
		if o.RecordAdmissions {
			c.record(&st, done.Sub(measureStart), o.Hits, true)
		}
		st.rpcs++
		st.allowed += allowed
		st.refused += refused
		st.errs += errs
		us := done.Sub(sent).Microseconds()
		_ = st.hist.RecordValue(min(max(us, histMin), histMax))
	}
	return st
}

// pacer says when a worker's calls are due: in an open loop (Rate > 0)
// call j of all is due at start + j/Rate and worker w sends calls w,
// w+Concurrency, w+2*Concurrency, ...; in a closed loop, at once.
type pacer struct {
	interval time.Duration // 0: closed loop
	first    time.Time
	end      time.Time
}

// newPacer is worker w's pacer.
func newPacer(o *Options, w int, start, end time.Time) pacer {
	p := pacer{first: start, end: end}
	if o.Rate > 0 {
		p.interval = time.Duration(float64(time.Second) * float64(o.Concurrency) / o.Rate)
		p.first = start.Add(time.Duration(float64(time.Second) * float64(w) / o.Rate))
	}
	return p
}

// due waits until the worker's call i is due and returns when it is sent;
// false once that is after the end.
func (p pacer) due(i int64) (time.Time, bool) {
	if p.interval <= 0 {
		sent := time.Now()
		return sent, !sent.After(p.end)
	}
	sent := p.first.Add(time.Duration(i) * p.interval)
	if sent.After(p.end) {
		return sent, false
	}
	if d := time.Until(sent); d > 0 {
		time.Sleep(d)
	}
	return sent, true
}

// caller is one worker's request and response of its API, built once and
// reused.
type caller struct {
	req    *request
	resp   *tokenmeshv1.CheckResponse
	rreq   *rlsRequest // API rls
	rresp  *rlsv3.RateLimitResponse
	greq   *gubRequest // API gubernator
	gresp  *gubResponse
	gcodec []grpc.CallOption
}

// newCaller is the caller of o's API.
func newCaller(o *Options) *caller {
	c := &caller{req: newRequest(o.Rule, o.Batch, o.Hits), resp: &tokenmeshv1.CheckResponse{}}
	if o.API == APIRLS {
		c.rreq, c.rresp = newRLSRequest(o.Domain, o.descriptorKey(), o.Batch, o.Hits), &rlsv3.RateLimitResponse{}
	}
	if o.API == APIGubernator {
		c.greq, c.gresp = newGubRequest(o.Rule, *o.Gubernator, o.Batch, o.Hits), &gubResponse{}
		c.gcodec = []grpc.CallOption{grpc.ForceCodec(gubCodec{})}
	}
	return c
}

// call draws the request's keys and sends it on conn.
func (c *caller) call(ctx context.Context, conn *grpc.ClientConn, keys *keyPicker, rng *rand.Rand) error {
	switch {
	case c.greq != nil:
		c.greq.draw(keys, rng)
		return conn.Invoke(ctx, gubernatorGetRateLimits, c.greq, c.gresp, c.gcodec...)
	case c.rreq != nil:
		c.rreq.draw(keys, rng)
		c.rresp.Reset()
		return conn.Invoke(ctx, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, c.rreq.msg, c.rresp)
	default:
		c.req.draw(keys, rng)
		c.resp.Reset()
		return conn.Invoke(ctx, tokenmeshv1.RateLimitService_Check_FullMethodName, c.req.msg, c.resp)
	}
}

// tally counts the answer's decisions of batch checks; bad says why the
// answer is malformed.
func (c *caller) tally(batch int, st *workerStats) (allowed, refused, errs int64, bad string) {
	switch {
	case c.greq != nil:
		return tallyGub(c.gresp, batch, st)
	case c.rreq != nil:
		allowed, refused, bad = tallyRLS(c.rresp, batch)
		return allowed, refused, 0, bad
	default:
		return tally(c.resp, batch, st)
	}
}

// record adds the answer's checks, at at, of hits tokens each, to st's
// answered checks, and with measured its admitted ones to st's
// admissions too. A check answered with an error (not a decision) is
// left out of both.
func (c *caller) record(st *workerStats, at time.Duration, hits int64, measured bool) {
	add := func(key string, admitted bool) {
		st.answered = append(st.answered, Answered{At: at, Key: key, Tokens: hits, Admitted: admitted})
		if admitted && measured {
			st.admissions = append(st.admissions, Admission{At: at, Key: key, Tokens: hits})
		}
	}
	switch {
	case c.greq != nil:
		for i, ok := range c.gresp.admitted {
			if !c.gresp.erred[i] {
				add(c.greq.keys[i], ok)
			}
		}
	case c.rreq != nil:
		for i, s := range c.rresp.GetStatuses() {
			add(c.rreq.entries[i].Value, s.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT)
		}
	default:
		for i, res := range c.resp.GetResults() {
			if res.GetError() == "" {
				add(c.req.items[i].Key, res.GetAllowed())
			}
		}
	}
}

// request is one worker's CheckRequest, built once and reused: each call
// only rewrites the items' keys (the generated message; no allocation per
// call beyond what grpc-go's codec does).
type request struct {
	msg   *tokenmeshv1.CheckRequest
	items []tokenmeshv1.CheckItem
}

func newRequest(rule string, batch int, hits int64) *request {
	r := &request{msg: &tokenmeshv1.CheckRequest{Checks: make([]*tokenmeshv1.CheckItem, batch)},
		items: make([]tokenmeshv1.CheckItem, batch)}
	for i := range r.items {
		r.items[i].Rule, r.items[i].Hits = rule, hits
		r.msg.Checks[i] = &r.items[i]
	}
	return r
}

// draw picks the keys of the next call.
func (r *request) draw(keys *keyPicker, rng *rand.Rand) {
	for i := range r.items {
		r.items[i].Key = keys.pick(rng)
	}
}

// drawKey picks one of keys uniformly; with a single key it draws nothing
// from rng.
func drawKey(keys []string, rng *rand.Rand) string {
	if len(keys) > 1 {
		return keys[rng.IntN(len(keys))]
	}
	return keys[0]
}

func (o *Options) descriptorKey() string {
	if o.DescriptorKey == "" {
		return "key"
	}
	return o.DescriptorKey
}

// rlsRequest is one worker's RateLimitRequest, built once and reused.
type rlsRequest struct {
	msg     *rlsv3.RateLimitRequest
	entries []ratelimitv3.RateLimitDescriptor_Entry
}

func newRLSRequest(domain, entryKey string, batch int, hits int64) *rlsRequest {
	r := &rlsRequest{msg: &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: uint32(hits),
		Descriptors: make([]*ratelimitv3.RateLimitDescriptor, batch)}, entries: make([]ratelimitv3.RateLimitDescriptor_Entry, batch)}
	for i := range r.entries {
		r.entries[i].Key = entryKey
		r.msg.Descriptors[i] = &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{&r.entries[i]}}
	}
	return r
}

func (r *rlsRequest) draw(keys *keyPicker, rng *rand.Rand) {
	for i := range r.entries {
		r.entries[i].Value = keys.pick(rng)
	}
}

// tallyRLS counts a RateLimitResponse's statuses: OK allowed, OVER_LIMIT
// refused.
func tallyRLS(resp *rlsv3.RateLimitResponse, want int) (allowed, refused int64, bad string) {
	if n := len(resp.GetStatuses()); n != want {
		return 0, 0, fmt.Sprintf("response holds %d statuses for %d descriptors", n, want)
	}
	for _, st := range resp.GetStatuses() {
		if st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			refused++
		} else {
			allowed++
		}
	}
	return allowed, refused, ""
}

// tally counts a CheckResponse's results into st; a response with other
// than want results is a failed call (its message returned).
func tally(resp *tokenmeshv1.CheckResponse, want int, st *workerStats) (allowed, refused, errs int64, bad string) {
	if n := len(resp.GetResults()); n != want {
		return 0, 0, 0, fmt.Sprintf("response holds %d results for %d checks", n, want)
	}
	for _, res := range resp.GetResults() {
		switch {
		case res.GetAllowed():
			allowed++
		case res.GetError() != "":
			errs++
			st.sample(res.GetError())
		default:
			refused++
		}
	}
	return allowed, refused, errs, ""
}
