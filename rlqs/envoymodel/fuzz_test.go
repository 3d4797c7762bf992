package envoymodel

import (
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/proto"
)

// fuzzProxy is a proxy with buckets in every phase: a token bucket
// assignment, a blanket rule about to expire into a token bucket fallback,
// and no assignment.
func fuzzProxy(t *testing.T) *Proxy {
	p := newProxy(t, settings(nil, tokenBucket(4, 1, sec(1)), dur(sec(30))))
	for _, id := range ids {
		p.Request(0, id)
	}
	apply(t, p, 0, assignment(ids[0], tokenBucket(10, 2, sec(1)), dur(sec(60))), assignment(ids[1], denyAll, dur(sec(3))))
	admit(p, sec(1), ids[0], 4)
	return p
}

// Apply on arbitrary responses never panics; an error leaves the proxy
// exactly as it was; a success keeps the invariants and is deterministic.
func FuzzApply(f *testing.F) {
	seeds := []*rlqsv3.RateLimitQuotaResponse{
		response(assignment(ids[0], tokenBucket(20, 2, sec(1)), dur(sec(60)))),
		response(assignment(ids[0], tokenBucket(10, 2, sec(7)), dur(sec(1)))),
		response(assignment(ids[1], tokenBucket(1, 0, 300*time.Millisecond), nil), abandon(ids[2])),
		response(assignment(ids[2], rptu(3), dur(sec(5))), assignment(ids[0], nil, dur(sec(5)))),
		response(assignment(web, allowAll, dur(sec(5)))),
		response(abandon(ids[0]), assignment(ids[0], denyAll, dur(sec(5)))),
	}
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, int64(2000))
	}
	f.Add([]byte{0x0a, 0x00}, int64(0))
	f.Fuzz(func(t *testing.T, data []byte, atMs int64) {
		resp := &rlqsv3.RateLimitQuotaResponse{}
		if err := proto.Unmarshal(data, resp); err != nil {
			t.Skip()
		}
		at := time.Duration(atMs%100_000) * time.Millisecond
		p, q := fuzzProxy(t), fuzzProxy(t)
		before := snapshot(p)
		out, err := p.Apply(at, resp)
		if err != nil {
			if after := snapshot(p); after != before {
				t.Fatalf("Apply failed (%v) but changed the state:\n%s\n%s", err, before, after)
			}
			return
		}
		if len(out) != len(resp.GetBucketAction()) {
			t.Fatalf("%d outcomes for %d actions", len(out), len(resp.GetBucketAction()))
		}
		for k, b := range p.buckets {
			if l := b.lim; l != nil && !l.unlimited && l.capacity.less(l.level) {
				t.Fatalf("%s: level above capacity", k)
			}
			if (b.lim != nil) != (b.action.GetTokenBucket() != nil) {
				t.Fatalf("%s: token bucket and action disagree", k)
			}
		}
		if _, err := q.Apply(at, resp); err != nil || snapshot(q) != snapshot(p) {
			t.Fatalf("Apply is not deterministic (%v)", err)
		}
		admit(p, at+time.Hour, ids[0], 3) // decisions after any response do not panic
	})
}
