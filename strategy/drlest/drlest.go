package drlest

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// Mode selects the baseline: GRD or FPS.
type Mode uint8

const (
	// GRD is Global Random Drop (strategy grd).
	GRD Mode = iota
	// FPS is Flow Proportional Share (strategy fps).
	FPS
)

// String is the strategy's name: "grd" or "fps".
func (m Mode) String() string {
	if m == FPS {
		return "fps"
	}
	return "grd"
}

// staleIntervals is how many intervals a peer's estimate of a key counts
// without a newer report of it.
const staleIntervals = 3

// minDemand is the smallest demand estimate kept, in tokens per second: a
// filtered estimate below it is 0 (so a key's estimate ends, instead of
// decaying forever).
const minDemand = 0.001

// peerDemand is a peer's estimate of a key and when it arrived.
type peerDemand struct {
	perSec float64
	at     time.Duration
}

// keyState is one key at this node: the tokens requested in the current
// interval, this node's filtered demand, the peers' latest estimates, and
// (fps) its sub-token bucket.
type keyState struct {
	count  int64
	demand float64 // tokens per second
	peers  map[strategy.NodeID]peerDemand
	bucket *bucket.Bucket // fps only; nil until the key's first request here
}

// DRL is one node of grd or fps.
type DRL struct {
	mode     Mode
	self     strategy.NodeID
	rate     bucket.Rate
	burst    int64
	rand     *rand.Rand
	interval time.Duration
	alpha    float64
	floor    float64
	units    int64       // fps: the rate is shared in units of r/units
	unitRate bucket.Rate // r/units
	members  []strategy.NodeID
	keys     map[string]*keyState
	mem      memory        // heap accounting for MemoryBytes (memory.go)
	seq      uint64        // intervals ended
	next     time.Duration // end of the current interval
}

// New builds a node of mode. Errors: an invalid Config, or a parameter
// outside its range (named).
func New(mode Mode, cfg strategy.Config) (*DRL, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	v, err := strategy.ReadParams(mode.String(), Params, cfg.Params)
	if err != nil {
		return nil, err
	}
	d := &DRL{mode: mode, self: cfg.Self, rate: cfg.Rate, burst: cfg.Burst, rand: cfg.Rand,
		interval: v.Duration("interval"), alpha: v.Float("alpha"), floor: v.Float("floor"),
		members: slices.Clone(cfg.Members), keys: map[string]*keyState{}}
	switch {
	case d.interval < time.Millisecond:
		return nil, fmt.Errorf("%s: parameter interval=%v must be at least 1ms", mode, d.interval)
	case !(d.alpha > 0 && d.alpha <= 1):
		return nil, fmt.Errorf("%s: parameter alpha=%v must be in (0, 1]", mode, d.alpha)
	case !(d.floor >= 0 && d.floor <= 1):
		return nil, fmt.Errorf("%s: parameter floor=%v must be in [0, 1]", mode, d.floor)
	}
	d.units, d.unitRate = rateUnits(cfg.Rate)
	return d, nil
}

// rateUnits is the finest resolution, 1000 units down to 1, at which r/units
// is a rate the bucket package represents exactly.
func rateUnits(r bucket.Rate) (int64, bucket.Rate) {
	for _, u := range []int64{1000, 100, 10} {
		if ur, err := r.Div(u); err == nil {
			return u, ur
		}
	}
	return 1, r
}

// Start schedules the end of the first interval.
func (d *DRL) Start(now time.Duration, fx *strategy.Effects) {
	d.next = now + d.interval
	fx.WakeAt(d.next)
}

// key is key's state, made on first use.
func (d *DRL) key(key string) *keyState {
	k := d.keys[key]
	if k == nil {
		k = &keyState{}
		d.keys[key] = k
		d.mem.keys.Add(key)
	}
	return k
}

// Request decides at once: grd admits with probability min(1, C/T); fps
// takes the tokens from this node's sub-token bucket of the key. Either
// way the request's tokens count towards this interval's demand.
func (d *DRL) Request(now time.Duration, req strategy.Request, fx *strategy.Effects) (strategy.Decision, bool) {
	k := d.key(req.Key)
	k.count += max(req.Tokens, 0)
	if d.mode == GRD {
		return strategy.Decision{RequestID: req.ID, Allowed: d.grdAdmit(now, k)}, true
	}
	if k.bucket == nil {
		k.bucket = d.newBucket(now, k)
		d.mem.buckets++
	}
	return strategy.Decision{RequestID: req.ID, Allowed: k.bucket.AllowN(req.Arrival, req.Tokens)}, true
}

// grdAdmit is GRD's draw: T the sum of the fresh estimates, C = r.
func (d *DRL) grdAdmit(now time.Duration, k *keyState) bool {
	t := d.total(now, k)
	c := d.rate.PerSec()
	if t <= c {
		return true
	}
	return d.rand.Float64() >= (t-c)/t
}

// total is the key's total demand estimate T at now: this node's and the
// fresh estimates of the live peers, in tokens per second.
func (d *DRL) total(now time.Duration, k *keyState) float64 {
	t := k.demand
	for _, p := range k.peers {
		if d.fresh(now, p) {
			t += p.perSec
		}
	}
	return t
}

// fresh reports whether a peer's estimate still counts at now.
func (d *DRL) fresh(now time.Duration, p peerDemand) bool {
	return now-p.at < staleIntervals*d.interval
}

// Tick ends every interval that is due: filters each key's count into its
// demand, sends the estimates, re-splits fps's buckets and drops keys with
// nothing left.
func (d *DRL) Tick(now time.Duration, fx *strategy.Effects) {
	if now < d.next {
		return
	}
	for d.next <= now {
		d.endInterval(d.next, fx)
		d.next += d.interval
	}
	fx.WakeAt(d.next)
}

// endInterval is the end of one interval at time at.
func (d *DRL) endInterval(at time.Duration, fx *strategy.Effects) {
	d.seq++
	perSec := float64(time.Second) / float64(d.interval)
	for _, name := range slices.Sorted(maps.Keys(d.keys)) {
		k := d.keys[name]
		k.demand = d.alpha*float64(k.count)*perSec + (1-d.alpha)*k.demand
		if k.demand < minDemand {
			k.demand = 0
		}
		k.count = 0
		for id, p := range k.peers {
			if !d.fresh(at, p) || !slices.Contains(d.members, id) {
				delete(k.peers, id)
			}
		}
		if d.mode == FPS && k.bucket != nil {
			d.resplit(at, k)
		}
		if k.demand == 0 && len(k.peers) == 0 && (k.bucket == nil || k.bucket.Full(at)) {
			delete(d.keys, name)
			d.dropped(name, k)
		}
	}
	d.shrinkKeys()
	d.report(fx)
}

// share is this node's units of the key's rate, out of d.units: floor
// split evenly over the live members plus the rest by weight.
func (d *DRL) share(now time.Duration, k *keyState) int64 {
	n := float64(max(len(d.members), 1))
	frac := 1 / n
	if total := d.total(now, k); total > 0 {
		frac = d.floor/n + (1-d.floor)*k.demand/total
	}
	return min(int64(math.Floor(frac*float64(d.units))), d.units)
}

// shape is the sub-token bucket (rate, burst) of u units: the rate's u
// units, and this node's whole-token share of the burst split evenly over
// the live members (bucket.SplitBurst, as static's; ours: Raghavan et al.'s
// FPS shares a rate, and a burst shared by weight would round most nodes'
// share of a small burst down to 0 tokens).
func (d *DRL) shape(u int64) (bucket.Rate, int64) {
	r := bucket.Rate{Tokens: d.unitRate.Tokens * u, Per: d.unitRate.Per}
	if u == 0 {
		r = bucket.Rate{}
	}
	b, err := bucket.SplitBurst(d.burst, max(len(d.members), 1), max(slices.Index(d.members, d.self), 0))
	if err != nil {
		b = 0
	}
	return r.Reduced(), b
}

// newBucket is fps's sub-token bucket of a key first requested here,
// full at this node's current share.
func (d *DRL) newBucket(now time.Duration, k *keyState) *bucket.Bucket {
	r, b := d.shape(d.share(now, k))
	nb, err := bucket.New(r, b, now)
	if err != nil { // r/units * u and b*u/units are within (r, b): valid
		nb = bucket.MustNew(bucket.Rate{}, 0, now)
	}
	return &nb
}

// resplit sets the key's bucket to this node's share, keeping its tokens
// (capped at the new burst).
func (d *DRL) resplit(now time.Duration, k *keyState) {
	r, b := d.shape(d.share(now, k))
	_ = k.bucket.SetRate(now, r, b) // within (r, b): valid
}

// SetMembers records the live members; a member gone takes its estimates
// with it at the next interval's end.
func (d *DRL) SetMembers(now time.Duration, members []strategy.NodeID, fx *strategy.Effects) {
	d.members = slices.Clone(members)
}

// StateBytes is the size of the node's state: per key its name, count,
// demand and bucket, and 16 bytes per peer estimate.
func (d *DRL) StateBytes() int {
	n := 0
	for name, k := range d.keys {
		n += len(name) + 16 + 16*len(k.peers)
		if k.bucket != nil {
			n += 16
		}
	}
	return n
}
