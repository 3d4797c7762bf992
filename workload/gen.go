package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Generator makes a synthetic trace. Implementations are immutable and safe for
// concurrent use.
type Generator interface {
	// Generate returns the trace for seed: requests sorted by Arrival (ties in
	// generation order), every Arrival a whole number of milliseconds in
	// [0, duration), every Tokens 1, keys like "u0001". The same generator and seed
	// always give the same trace. If the spec sets seed=N, N is used and the argument is
	// ignored. The trace may be empty when the expected number of requests is small.
	Generate(seed uint64) *Trace
	// String returns the canonical spec with every parameter spelled out, e.g.
	// "poisson:users=50,rate=1,duration=60s"; ParseGenerator(g.String()) gives an
	// equivalent generator. It is also the generated Trace.Name.
	String() string
}

// Generator kinds.
const (
	kindPoisson  = "poisson"
	kindPeriodic = "periodic"
	kindBatch    = "batch"
	kindHeavy    = "heavy"
	kindMix      = "mix"
	kindTenants  = "tenants"
)

// Limits on generator parameters, so that a typo cannot exhaust memory.
const (
	maxUsers       = 1_000_000
	maxBatchSize   = 1_000_000
	maxGenRequests = 10_000_000
)

// PCG stream constants, one per kind, so that components of a mix generated from one
// seed are independent.
const (
	streamPoisson  = 0x9e3779b97f4a7c15
	streamPeriodic = 0xbf58476d1ce4e5b9
	streamBatch    = 0x94d049bb133111eb
	streamHeavy    = 0xd6e8feb86659fd93
	streamRandom   = 0xa0761d6478bd642f // random assigner
)

// kindParams lists, per kind, the parameters in canonical order.
var kindParams = map[string][]string{
	kindPoisson:  {"users", "rate", "duration", "seed"},
	kindPeriodic: {"users", "period", "jitter", "duration", "seed"},
	kindBatch:    {"users", "rate", "size", "duration", "seed"},
	kindHeavy:    {"users", "rate", "s", "duration", "seed"},
	kindMix:      {"duration", "seed"},
	kindTenants:  {"users", "rate", "duration", "follow", "seed"},
}

var kindNames = []string{kindPoisson, kindPeriodic, kindBatch, kindHeavy, kindMix, kindTenants}

// genSpec is a parsed generator spec. Fields not used by the kind stay zero.
type genSpec struct {
	kind     string
	users    int           // number of users (keys)
	rate     float64       // poisson: req/s per user; batch: batches/s per user; heavy: total req/s
	period   time.Duration // periodic: time between a user's requests
	jitter   time.Duration // periodic: each request moves by a uniform offset in [-jitter, +jitter]
	size     int           // batch: requests per batch
	s        float64       // heavy: Zipf exponent
	duration time.Duration
	follow   time.Duration // tenants: the load moves to the next region every follow (Trace.Follow); 0: off
	seed     uint64
	hasSeed  bool
	prefix   string // key prefix: "u", or the component letter inside a mix
}

func defaultSpec(kind string) genSpec {
	g := genSpec{kind: kind, users: 50, duration: 60 * time.Second, prefix: "u"}
	switch kind {
	case kindPoisson:
		g.rate = 1
	case kindPeriodic:
		g.period = time.Second
	case kindBatch:
		g.users, g.rate, g.size = 10, 0.2, 10
	case kindHeavy:
		g.users, g.rate, g.s = 200, 200, 1.2
	case kindMix:
		g.users = 0
	case kindTenants:
		g.users, g.rate, g.prefix = 20, 2000, "tenant"
	}
	return g
}

// Default returns the built-in workload used by `tokenmesh sim` without an input:
// "mix:duration=60s", 60 s of about 6,100 requests from four components merged in time
// order (equal times in component order), each with its own key prefix:
//
//   - p0001..p0100: 100 Poisson users at 0.5 req/s each;
//   - t0001..t0005: 5 periodic users at 4 req/s (period 250ms, jitter ±10ms);
//   - b0001..b0003: 3 batch users sending 20 requests at once about every 5 s;
//   - h0001..h0020: 20 heavy hitters sharing 20 req/s with Zipf s=1.2 (h0001 heaviest).
func Default() Generator {
	g := defaultSpec(kindMix)
	return &g
}

// mixComponents returns the components of a mix with the given duration.
func mixComponents(d time.Duration) []genSpec {
	p := genSpec{kind: kindPoisson, users: 100, rate: 0.5, duration: d, prefix: "p"}
	t := genSpec{kind: kindPeriodic, users: 5, period: 250 * time.Millisecond, jitter: 10 * time.Millisecond, duration: d, prefix: "t"}
	b := genSpec{kind: kindBatch, users: 3, rate: 0.2, size: 20, duration: d, prefix: "b"}
	h := genSpec{kind: kindHeavy, users: 20, rate: 20, s: 1.2, duration: d, prefix: "h"}
	return []genSpec{p, t, b, h}
}

// ParseGenerator parses a generator spec "KIND" or "KIND:name=value,name=value,...".
// Parameters not given take their defaults. Durations use Go syntax ("60s", "1500ms",
// "2m") and must be positive whole numbers of milliseconds (jitter may be 0).
//
//	poisson:  users=50 rate=1 duration=60s        Poisson arrivals, rate in req/s per user
//	periodic: users=50 period=1s jitter=0 duration=60s
//	          one request per period per user, from a random phase in [0, period),
//	          each moved by a uniform offset in [-jitter, +jitter] (requests moved
//	          outside [0, duration) are dropped; jitter must not exceed duration)
//	batch:    users=10 rate=0.2 size=10 duration=60s
//	          Poisson batches, rate in batches/s per user, size requests per batch at
//	          the same ms
//	heavy:    users=200 rate=200 s=1.2 duration=60s
//	          Poisson arrivals at rate req/s in total; user k (1-based) is chosen with
//	          probability proportional to k^-s (Zipf; s >= 0, 0 is uniform)
//	mix:      duration=60s                          the [Default] mix
//	tenants:  users=20 rate=2000 duration=60s
//	          a few tenants (keys tenant0001..) at high Poisson rates, rate in
//	          req/s per tenant: a per-tenant API limit behind a gateway fleet
//	          (run it with e.g. --rate 1000 --burst 1000 --nodes 30 --assign
//	          roundrobin: each tenant offered twice its limit, spread over
//	          every node)
//	          follow=20s: follow the sun: each tenant's load is offered in
//	          one region at a time and moves to the next region every 20s
//	          (Trace.Follow; the simulator's --regions place it: tenant k,
//	          from 0, in region (k + floor(t/follow)) mod R)
//
// Every kind also takes seed=N (an unsigned 64-bit integer), which overrides the seed
// passed to Generate. users is 1..1000000, size is 1..1000000, rate is positive and
// finite, and the expected number of requests must not exceed 10,000,000.
//
// Errors name the kind and the bad parameter: an unknown kind (listing the kinds), an
// unknown or repeated parameter (listing the allowed ones), a parameter without
// "=value", or a value that is unparsable or out of range.
func ParseGenerator(spec string) (Generator, error) {
	kind, params, _ := strings.Cut(strings.TrimSpace(spec), ":")
	kind = strings.TrimSpace(kind)
	allowed, ok := kindParams[kind]
	if !ok {
		return nil, fmt.Errorf("workload: unknown generator kind %q in %q (want %s)",
			kind, spec, strings.Join(kindNames, ", "))
	}
	g := defaultSpec(kind)
	bad := func(format string, args ...any) error {
		return fmt.Errorf("workload: generator %s: %s", kind, fmt.Sprintf(format, args...))
	}
	seen := map[string]bool{}
	if strings.TrimSpace(params) != "" {
		for _, kv := range strings.Split(params, ",") {
			name, value, hasValue := strings.Cut(kv, "=")
			name, value = strings.TrimSpace(name), strings.TrimSpace(value)
			if name == "" {
				return nil, bad("empty parameter in %q (want name=value,...; allowed: %s)", spec, strings.Join(allowed, ", "))
			}
			if !contains(allowed, name) {
				return nil, bad("unknown parameter %q (allowed: %s)", name, strings.Join(allowed, ", "))
			}
			if !hasValue || value == "" {
				return nil, bad("parameter %q has no value (want %s=VALUE)", name, name)
			}
			if seen[name] {
				return nil, bad("parameter %q given twice", name)
			}
			seen[name] = true
			if err := g.set(name, value); err != nil {
				return nil, bad("%v", err)
			}
		}
	}
	if g.jitter > g.duration {
		return nil, bad("jitter %s is longer than duration %s", formatMs(g.jitter), formatMs(g.duration))
	}
	if n := g.expected(); n > maxGenRequests {
		return nil, bad("about %.0f requests expected, more than the limit of %d; lower users, rate, size or duration, or raise period",
			n, maxGenRequests)
	}
	return &g, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// set parses one parameter value into g.
func (g *genSpec) set(name, value string) error {
	switch name {
	case "users":
		return setInt(&g.users, name, value, maxUsers)
	case "size":
		return setInt(&g.size, name, value, maxBatchSize)
	case "rate":
		f, err := strconv.ParseFloat(value, 64)
		if err != nil || !(f > 0) || math.IsInf(f, 0) {
			return fmt.Errorf("rate %q must be a positive number (per second)", value)
		}
		g.rate = f
	case "s":
		f, err := strconv.ParseFloat(value, 64)
		if err != nil || !(f >= 0) || f > 100 {
			return fmt.Errorf("s %q must be a number from 0 to 100", value)
		}
		g.s = f
	case "duration", "period", "jitter", "follow":
		return g.setDuration(name, value)
	case "seed":
		n, err := strconv.ParseUint(value, 10, 64)
		if err != nil {
			return fmt.Errorf("seed %q must be an unsigned 64-bit integer", value)
		}
		g.seed, g.hasSeed = n, true
	}
	return nil
}

// setInt parses parameter name's value, a whole number from 1 to max,
// into v.
func setInt(v *int, name, value string, max int) error {
	n, err := strconv.Atoi(value)
	if err != nil || n < 1 || n > max {
		return fmt.Errorf("%s %q must be a whole number from 1 to %d", name, value, max)
	}
	*v = n
	return nil
}

// setDuration parses the duration parameter name (duration, period,
// jitter or follow): whole milliseconds, positive (jitter and follow may
// be 0).
func (g *genSpec) setDuration(name, value string) error {
	d, err := time.ParseDuration(value)
	if err != nil {
		return fmt.Errorf("%s %q is not a duration like 60s, 1500ms or 2m", name, value)
	}
	if d < 0 || d == 0 && name != "jitter" && name != "follow" {
		return fmt.Errorf("%s %q must be positive", name, value)
	}
	if d%time.Millisecond != 0 {
		return fmt.Errorf("%s %q is not a whole number of milliseconds", name, value)
	}
	switch name {
	case "duration":
		g.duration = d
	case "period":
		g.period = d
	case "follow":
		g.follow = d
	default:
		g.jitter = d
	}
	return nil
}

// expected returns the expected number of requests.
func (g *genSpec) expected() float64 {
	sec := g.duration.Seconds()
	switch g.kind {
	case kindPoisson, kindTenants:
		return float64(g.users) * g.rate * sec
	case kindPeriodic:
		return float64(g.users) * (float64(g.duration)/float64(g.period) + 1)
	case kindBatch:
		return float64(g.users) * g.rate * sec * float64(g.size)
	case kindHeavy:
		return g.rate * sec
	case kindMix:
		var n float64
		for _, c := range mixComponents(g.duration) {
			n += c.expected()
		}
		return n
	}
	return 0
}

func (g *genSpec) String() string {
	var b strings.Builder
	b.WriteString(g.kind)
	for i, name := range kindParams[g.kind] {
		var v string
		switch name {
		case "users":
			v = strconv.Itoa(g.users)
		case "size":
			v = strconv.Itoa(g.size)
		case "rate":
			v = strconv.FormatFloat(g.rate, 'g', -1, 64)
		case "s":
			v = strconv.FormatFloat(g.s, 'g', -1, 64)
		case "duration":
			v = formatMs(g.duration)
		case "period":
			v = formatMs(g.period)
		case "jitter":
			v = formatMs(g.jitter)
		case "follow":
			if g.follow == 0 {
				continue
			}
			v = formatMs(g.follow)
		case "seed":
			if !g.hasSeed {
				continue
			}
			v = strconv.FormatUint(g.seed, 10)
		}
		if i == 0 {
			b.WriteByte(':')
		} else {
			b.WriteByte(',')
		}
		b.WriteString(name + "=" + v)
	}
	return b.String()
}

// formatMs formats a whole-millisecond duration as "60s" or "1500ms".
func formatMs(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return strconv.FormatInt(int64(d/time.Millisecond), 10) + "ms"
}

func (g *genSpec) Generate(seed uint64) *Trace {
	if g.hasSeed {
		seed = g.seed
	}
	t := &Trace{Name: g.String(), Follow: g.follow}
	if g.kind == kindMix {
		for _, c := range mixComponents(g.duration) {
			t.Requests = append(t.Requests, c.generate(seed)...)
		}
	} else {
		t.Requests = g.generate(seed)
	}
	sortStable(t.Requests)
	return t
}

// generate returns the requests of a non-mix spec, not necessarily sorted.
func (g *genSpec) generate(seed uint64) []Request {
	keys := newKeyNamer(g.prefix, g.users)
	durMs := int64(g.duration / time.Millisecond)
	reqs := make([]Request, 0, int(math.Min(g.expected()*1.1+16, maxGenRequests)))
	switch g.kind {
	case kindPoisson, kindBatch, kindHeavy, kindTenants:
		reqs = g.generatePoisson(reqs, keys, seed, durMs)
	case kindPeriodic:
		reqs = g.generatePeriodic(reqs, keys, seed, durMs)
	}
	return reqs
}

// msAt is ms milliseconds as a duration.
func msAt(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

// generatePoisson appends to reqs the requests of a poisson, batch, heavy
// or tenants spec over durMs milliseconds.
func (g *genSpec) generatePoisson(reqs []Request, keys *keyNamer, seed uint64, durMs int64) []Request {
	var stream uint64
	var total float64 // events (requests or batches) per second, all users together
	per := 1          // requests per event
	switch g.kind {
	case kindPoisson, kindTenants:
		stream, total = streamPoisson, float64(g.users)*g.rate
	case kindBatch:
		stream, total, per = streamBatch, float64(g.users)*g.rate, g.size
	case kindHeavy:
		stream, total = streamHeavy, g.rate
	}
	r := rand.New(rand.NewPCG(seed, stream))
	var pick func() int
	if g.kind == kindHeavy {
		pick = zipfPicker(r, g.users, g.s)
	} else {
		pick = func() int { return r.IntN(g.users) }
	}
	// A superposition of independent Poisson processes is one Poisson process whose
	// events belong to a uniformly chosen user (or, for heavy, a Zipf-chosen one).
	sec := 0.0
	for {
		sec += r.ExpFloat64() / total
		ms := int64(math.Floor(sec * 1000))
		if sec*1000 >= float64(durMs) || ms >= durMs {
			break
		}
		key := keys.name(pick())
		for range per {
			reqs = append(reqs, Request{Arrival: msAt(ms), Key: key, Tokens: 1})
		}
	}
	return reqs
}

// generatePeriodic appends to reqs the requests of a periodic spec over
// durMs milliseconds.
func (g *genSpec) generatePeriodic(reqs []Request, keys *keyNamer, seed uint64, durMs int64) []Request {
	r := rand.New(rand.NewPCG(seed, streamPeriodic))
	periodMs := int64(g.period / time.Millisecond)
	jitterMs := int64(g.jitter / time.Millisecond)
	for u := range g.users {
		key := keys.name(u)
		for base := r.Int64N(periodMs); base < durMs+jitterMs; base += periodMs {
			ms := base
			if jitterMs > 0 {
				ms += r.Int64N(2*jitterMs+1) - jitterMs
			}
			if ms >= 0 && ms < durMs {
				reqs = append(reqs, Request{Arrival: msAt(ms), Key: key, Tokens: 1})
			}
		}
	}
	return reqs
}

// zipfPicker returns a function choosing user index k-1 with probability proportional
// to k^-s, k = 1..users.
func zipfPicker(r *rand.Rand, users int, s float64) func() int {
	cdf := make([]float64, users)
	sum := 0.0
	for k := range users {
		sum += math.Pow(float64(k+1), -s)
		cdf[k] = sum
	}
	return func() int {
		x := r.Float64() * sum
		i := sort.Search(users, func(i int) bool { return cdf[i] > x })
		return min(i, users-1)
	}
}

// keyNamer names users prefix+"0001".. with at least 4 digits, creating each name once.
type keyNamer struct {
	prefix string
	width  int
	names  []string
}

func newKeyNamer(prefix string, users int) *keyNamer {
	return &keyNamer{prefix: prefix, width: max(4, len(strconv.Itoa(users))), names: make([]string, users)}
}

func (k *keyNamer) name(u int) string {
	if k.names[u] == "" {
		k.names[u] = fmt.Sprintf("%s%0*d", k.prefix, k.width, u+1)
	}
	return k.names[u]
}
