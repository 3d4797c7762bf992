package proxy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/tokenmesh/tokenmesh/rlqs/envoymodel"
)

// Fleet is a running fleet of emulated Envoys (Start).
type Fleet struct {
	cfg     Config
	start   time.Time
	cancel  context.CancelFunc
	loads   sync.WaitGroup // one per proxy, done when its loads are over
	running sync.WaitGroup // every goroutine of the fleet
	rec     recorder
	proxies []*emulated
	stop    sync.Once
	final   *Record
}

// Start starts cfg.Proxies emulated Envoys and their offered load; the fleet
// runs until every load is over (Wait), Stop is called, or ctx is done.
// Errors (before anything starts): an invalid Config or model
// configuration, or an address gRPC cannot parse.
func Start(ctx context.Context, cfg Config) (*Fleet, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.ConnectTimeout = orDefault(cfg.ConnectTimeout, time.Second)
	cfg.MaxBackoff = orDefault(cfg.MaxBackoff, time.Second)
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS)
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: cfg.MaxBackoff / 10, Multiplier: 1.6, Jitter: 0.2, MaxDelay: cfg.MaxBackoff},
			MinConnectTimeout: cfg.ConnectTimeout,
		}),
	}, cfg.DialOptions...)

	f := &Fleet{cfg: cfg}
	for i := range cfg.Proxies {
		p, err := f.newEmulated(i, opts)
		if err != nil {
			f.closeConns()
			return nil, err
		}
		f.proxies = append(f.proxies, p)
	}
	for i, l := range cfg.Loads {
		p := f.proxies[l.Proxy]
		p.loads = append(p.loads, newLoadState(l, rand.New(rand.NewPCG(cfg.Seed, uint64(i)))))
	}
	ctx, f.cancel = context.WithCancel(ctx)
	f.start = time.Now()
	for _, p := range f.proxies {
		f.loads.Add(1)
		f.running.Add(2)
		go p.loop(ctx)
		go p.send(ctx)
	}
	return f, nil
}

func (f *Fleet) newEmulated(i int, opts []grpc.DialOption) (*emulated, error) {
	m, err := envoymodel.New(f.cfg.Model)
	if err != nil {
		return nil, fmt.Errorf("proxy: Config.Model: %w", err)
	}
	p := &emulated{
		f: f, idx: i, model: m,
		events: make(chan event, 64),
		out:    make(chan outgoing, 1024),
	}
	if f.cfg.Spread {
		p.addr = i % len(f.cfg.Addrs)
	}
	for _, a := range f.cfg.Addrs {
		conn, err := grpc.NewClient(a, opts...)
		if err != nil {
			p.conns = append(p.conns, nil)
			p.closeConns()
			return nil, fmt.Errorf("proxy: Config.Addrs %q: %w", a, err)
		}
		p.conns = append(p.conns, conn)
	}
	return p, nil
}

// Wait blocks until every load is over (or the context given to Start is
// done), then stops the fleet and returns its record.
func (f *Fleet) Wait() *Record {
	f.loads.Wait()
	return f.Stop()
}

// Stop stops every proxy now (streams closed, goroutines ended, connections
// closed) and returns the fleet's record; later calls return the same one.
func (f *Fleet) Stop() *Record {
	f.stop.Do(func() {
		f.cancel()
		f.running.Wait()
		f.closeConns()
		f.final = f.rec.snapshot()
	})
	return f.final
}

func (f *Fleet) since() time.Duration { return time.Since(f.start) }

func (f *Fleet) closeConns() {
	for _, p := range f.proxies {
		p.closeConns()
	}
}

// loadState is a Load's arrival schedule.
type loadState struct {
	Load
	rng     *rand.Rand
	next    time.Duration // the next arrival
	offered int
}

func newLoadState(l Load, rng *rand.Rand) *loadState {
	s := &loadState{Load: l, rng: rng, next: l.Start}
	if l.Arrivals == Poisson {
		s.next += s.gap()
	}
	return s
}

func (s *loadState) gap() time.Duration {
	mean := float64(time.Second) / s.Rate
	if s.Arrivals == Poisson {
		return time.Duration(s.rng.ExpFloat64() * mean)
	}
	return time.Duration(mean)
}

// over reports whether the load has offered all its requests.
func (s *loadState) over() bool {
	return (s.Count > 0 && s.offered >= s.Count) || (s.Duration > 0 && s.next >= s.Start+s.Duration)
}

// emulated is one Envoy: its model, its loads, and its stream (owned by the
// send goroutine).
type emulated struct {
	f      *Fleet
	idx    int
	model  *envoymodel.Proxy // used by the loop goroutine only
	loads  []*loadState
	events chan event    // stream goroutines -> loop
	out    chan outgoing // loop -> send
	conns  []*grpc.ClientConn
	addr   int    // index in Config.Addrs of the next stream; send goroutine only
	opened uint64 // streams opened; send goroutine only
	live   uint64 // the newest stream the loop heard of; loop only
}

// event is what the stream goroutines tell the loop: a response, or a
// stream event.
type event struct {
	gen  uint64 // the stream's (0 for a failed open)
	addr string
	resp *rlqsv3.RateLimitQuotaResponse
	kind StreamEventKind
	err  error
}

// outgoing is a report for the send goroutine.
type outgoing struct {
	at      time.Duration
	usage   *rlqsv3.RateLimitQuotaUsageReports
	initial bool
}

// loop is the proxy's one goroutine calling its model: it offers the loads'
// requests when due, fires the report timer, and applies what the stream
// goroutines received.
func (p *emulated) loop(ctx context.Context) {
	defer p.f.running.Done()
	loadsOver := false
	defer func() {
		if !loadsOver {
			p.f.loads.Done()
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		p.due(p.f.since())
		if !loadsOver && p.loadsOver() {
			loadsOver = true
			p.f.loads.Done()
		}
		wait := time.Hour
		if at, ok := p.nextDue(); ok {
			wait = max(0, at-p.f.since())
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case ev := <-p.events:
			p.handle(p.f.since(), ev)
		case <-timer.C:
		}
	}
}

// due runs, in time order, every arrival and report timer due by now.
func (p *emulated) due(now time.Duration) {
	for {
		at, ok := p.nextDue()
		if !ok || at > now {
			return
		}
		if r, ok := p.model.NextReport(); ok && r == at {
			p.enqueue(now, p.model.Report(now), false)
			continue
		}
		for _, l := range p.loads {
			if !l.over() && l.next == at {
				b := l.Bucket
				if len(l.Buckets) > 0 {
					b = l.Buckets[l.rng.IntN(len(l.Buckets))]
				}
				t0 := time.Now()
				allowed, initial := p.model.Request(now, b)
				took := time.Since(t0)
				p.f.rec.add(func(r *Record) {
					r.Decisions = append(r.Decisions, Decision{At: now, Proxy: p.idx, Bucket: b.Key(), Allowed: allowed, Took: took})
				})
				if initial != nil {
					p.enqueue(now, initial, true)
				}
				l.offered++
				l.next += l.gap()
				break
			}
		}
	}
}

// nextDue is the earliest pending arrival or report timer.
func (p *emulated) nextDue() (at time.Duration, ok bool) {
	at, ok = p.model.NextReport()
	for _, l := range p.loads {
		if !l.over() && (!ok || l.next < at) {
			at, ok = l.next, true
		}
	}
	return at, ok
}

func (p *emulated) loadsOver() bool {
	for _, l := range p.loads {
		if !l.over() {
			return false
		}
	}
	return true
}

func (p *emulated) enqueue(now time.Duration, usage *rlqsv3.RateLimitQuotaUsageReports, initial bool) {
	select {
	case p.out <- outgoing{at: now, usage: usage, initial: initial}:
	default: // the sender is stuck far behind: drop, as a full stream would
		size := proto.Size(usage)
		p.f.rec.add(func(r *Record) {
			r.Reports = append(r.Reports, Report{At: now, Proxy: p.idx, Initial: initial, Usage: usage, Bytes: size})
		})
	}
}

// handle applies a response, or records a stream event: a failed open, or
// the end of the newest stream, resets the model's stream (onRemoteClose);
// the end of an older one, reported late, does not.
func (p *emulated) handle(now time.Duration, ev event) {
	if ev.resp == nil {
		switch {
		case ev.kind == Opened:
			p.live = ev.gen
		case ev.gen == 0 || ev.gen >= p.live:
			p.model.StreamReset(now)
		}
		p.recordStream(now, ev.addr, ev.kind, ev.err)
		return
	}
	outs, err := p.model.Apply(now, ev.resp)
	size := proto.Size(ev.resp)
	p.f.rec.add(func(r *Record) {
		r.Responses = append(r.Responses, Response{At: now, Proxy: p.idx, Addr: ev.addr, Actions: len(ev.resp.GetBucketAction()), Bytes: size})
	})
	if err != nil {
		p.recordStream(now, ev.addr, BadResponse, err)
		return
	}
	p.f.rec.add(func(r *Record) {
		for i, a := range ev.resp.GetBucketAction() {
			qa := a.GetQuotaAssignmentAction()
			r.Assignments = append(r.Assignments, Assignment{
				At: now, Proxy: p.idx, Addr: ev.addr, Bucket: outs[i].Bucket.Key(),
				Strategy: qa.GetRateLimitStrategy(), TTL: qa.GetAssignmentTimeToLive().AsDuration(), Effect: outs[i].Effect,
			})
		}
	})
}

func (p *emulated) recordStream(now time.Duration, addr string, kind StreamEventKind, err error) {
	e := StreamEvent{At: now, Proxy: p.idx, Addr: addr, Kind: kind}
	if err != nil {
		e.Err = err.Error()
	}
	p.f.rec.add(func(r *Record) { r.Streams = append(r.Streams, e) })
}

func (p *emulated) closeConns() {
	for _, c := range p.conns {
		if c != nil {
			c.Close()
		}
	}
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
