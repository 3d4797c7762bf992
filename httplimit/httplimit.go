// Package httplimit is a net/http middleware that rate limits requests
// with a tokenmesh rule: it takes each request's key from the request (a
// header, the client address, a path segment or a JWT claim, by a key
// template like the config's "{header:x-api-key}"), asks a Checker (a
// tokenmesh cluster over gRPC, or an in-process cluster.Node) for one
// token, and answers a refusal itself with 429 Too Many Requests (or
// Options.RefusalStatus), Retry-After, and the RateLimit and
// RateLimit-Policy headers of the IETF draft "RateLimit header fields for HTTP"
// (draft-ietf-httpapi-ratelimit-headers-09, sections 3 and 4); allowed
// requests get the same two headers and go to the next handler.
//
//	mw, err := httplimit.New(httplimit.Options{Rule: "api", Key: "{header:x-api-key}",
//	        Checker: httplimit.GRPC(tokenmeshv1.NewRateLimitServiceClient(conn))})
//	http.ListenAndServe(":8080", mw.Wrap(appHandler))
//
// A program that embeds a node (package limiter) checks against it with
// httplimit.LocalNode(node) instead of GRPC: the rule's rate and burst are
// the node's.
//
// Headers (theirs: the draft's structured fields; ours: how a token
// bucket fills them):
//
//	RateLimit-Policy: "api";q=20;w=2    quota q = the rule's burst, window w =
//	                                    seconds the rate takes to refill it (rounded up)
//	RateLimit: "api";r=19;t=1           r = tokens left (0 when unknown),
//	                                    t = seconds until the bucket is full (rounded up)
//	Retry-After: 1                      (refusals only) seconds until the hits could be
//	                                    admitted, rounded up, at least 1
//
// Endpoints (endpoints.go) serves several rules as an HTTP edge at
// /v1/limit/{rule}, each with its own key template: 200 "allowed" or the
// refusal, for an auth subrequest (nginx auth_request, Traefik
// forwardAuth); `tokenmesh serve`'s HTTP mode is this.
//
// Each check carries the request's edge time (edge.go): when Wrap received
// it, or the time a gateway in front put in Options.EdgeHeader
// (X-Request-Start); an owner rule decides a key's requests in that order.
//
// JWT claims are read WITHOUT verifying the token's signature: the
// middleware only needs a stable key, and a forged claim only moves the
// forger into another bucket. Put it behind whatever verifies the token
// (an API gateway, or your own handler's verification) when the claim must
// be trusted; this package does no JWT verification of its own.
package httplimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/httplimit/keytemplate"
	"github.com/tokenmesh/tokenmesh/limiter"
	"github.com/tokenmesh/tokenmesh/rule"
)

// Result is a Checker's verdict on one request.
type Result struct {
	Allowed bool
	// Limit is the quota: the rule's burst, tokens.
	Limit int64
	// Window is the time the rule's rate takes to refill Limit tokens.
	Window time.Duration
	// Remaining is the tokens left after the decision; -1 when unknown.
	Remaining int64
	// Reset is the time until the bucket is full again; -1 when unknown.
	Reset time.Duration
	// RetryAfter, for a refusal, is when to ask again; -1 for never (hits
	// above the burst, rate 0).
	RetryAfter time.Duration
}

// Checker decides hits of key under one rule.
type Checker interface {
	Check(ctx context.Context, rule, key string, hits int64) (Result, error)
}

// CheckerFunc adapts a function to Checker.
type CheckerFunc func(ctx context.Context, rule, key string, hits int64) (Result, error)

// Check calls f.
func (f CheckerFunc) Check(ctx context.Context, rule, key string, hits int64) (Result, error) {
	return f(ctx, rule, key, hits)
}

// checkClient is the part of tokenmeshv1.RateLimitServiceClient GRPC uses.
type checkClient interface {
	Check(ctx context.Context, in *tokenmeshv1.CheckRequest, opts ...grpc.CallOption) (*tokenmeshv1.CheckResponse, error)
}

// GRPC is a Checker over a tokenmesh cluster's gRPC API
// (tokenmesh.v1.RateLimitService/Check). The edge time ctx carries
// (ContextWithEdgeTime) goes with the check as created_at_unix_ns.
func GRPC(client tokenmeshv1.RateLimitServiceClient) Checker { return grpcChecker{client} }

type grpcChecker struct{ c checkClient }

func (g grpcChecker) Check(ctx context.Context, rule, key string, hits int64) (Result, error) {
	resp, err := g.c.Check(ctx, &tokenmeshv1.CheckRequest{Checks: []*tokenmeshv1.CheckItem{{Rule: rule, Key: key, Hits: hits,
		CreatedAtUnixNs: edgeUnixNs(ctx)}}})
	if err != nil {
		return Result{}, err
	}
	if len(resp.GetResults()) != 1 {
		return Result{}, fmt.Errorf("tokenmesh answered %d results for 1 check", len(resp.GetResults()))
	}
	r := resp.GetResults()[0]
	if strings.Contains(r.GetError(), "not decided") {
		return Result{}, errors.New(r.GetError()) // not decided
	}
	ms := func(v int64) time.Duration {
		if v < 0 {
			return -1
		}
		return time.Duration(v) * time.Millisecond
	}
	out := Result{Allowed: r.GetAllowed(), Limit: r.GetBurst(), Remaining: r.GetRemaining(),
		Reset: ms(r.GetResetAfterMs()), RetryAfter: ms(r.GetRetryAfterMs())}
	out.Window = window(r.GetBurst(), r.GetLimitPerS())
	return out, nil
}

// window is the time rate (tokens/s) takes to refill burst tokens.
func window(burst int64, perSec float64) time.Duration {
	if perSec <= 0 {
		return -1
	}
	s := float64(burst) / perSec
	if s*1e9 >= math.MaxInt64 {
		return -1
	}
	return time.Duration(math.Ceil(s * 1e9))
}

// batchChecker is *cluster.Node's CheckBatch.
type batchChecker interface {
	CheckBatch(ctx context.Context, items []cluster.BatchItem) ([]cluster.BatchResult, error)
}

// itemChecker is *cluster.Node's CheckItem: one check without a batch's
// allocations (its fast path decides in the caller's goroutine).
type itemChecker interface {
	CheckItem(ctx context.Context, it cluster.BatchItem) (cluster.CheckResult, error)
}

// Local is a Checker over an in-process node for rules, the node's rules
// (a *cluster.Node, or server's in-process Server); for a limiter.Node,
// LocalNode reads the rules from the node instead. A node that also has
// CheckItem (as *cluster.Node does) decides through it, with the same
// answers as a batch of one. The edge time ctx carries
// (ContextWithEdgeTime) goes with the check (cluster.BatchItem.CreatedAtUnixNs).
func Local(node batchChecker, rules []rule.Rule) Checker {
	byName := map[string]rule.Rule{}
	for _, r := range rules {
		byName[r.Name] = r
	}
	return withAcquire(localChecker(node, func(rule string) (float64, int64, bool) {
		r, ok := byName[rule]
		return r.Rate.PerSec(), r.Burst, ok
	}), node)
}

// LocalNode is a Checker over an in-process limiter.Node (the embedded
// library) with the node's own rules: each check reads its rule's rate and
// burst from the node (Node.Limiter), so the rules are not repeated here and
// a reload (Node.SetRules) is followed. Its answers are Local's.
//
//	node, _ := limiter.Start(ctx, limiter.Config{Rules: rules})
//	mw, _ := httplimit.New(httplimit.Options{Rule: "api", Checker: httplimit.LocalNode(node)})
func LocalNode(node *limiter.Node) Checker {
	return withAcquire(localChecker(node.Cluster(), func(rule string) (float64, int64, bool) {
		lim, err := node.Limiter(rule)
		if err != nil {
			return 0, 0, false
		}
		return lim.Limit(), lim.Burst(), true
	}), node.Cluster())
}

// localChecker is Local and LocalNode: lookup gives a rule's rate (tokens
// per second) and burst, false for a rule the node lacks.
func localChecker(node batchChecker, lookup func(rule string) (perSec float64, burst int64, ok bool)) Checker {
	single, _ := node.(itemChecker)
	return CheckerFunc(func(ctx context.Context, rule string, key string, hits int64) (Result, error) {
		perSec, burst, ok := lookup(rule)
		if !ok {
			return Result{}, fmt.Errorf("rule %q is not a rule of this node", rule)
		}
		var (
			d   cluster.CheckResult
			err error
		)
		it := cluster.BatchItem{Rule: rule, Key: key, Tokens: hits, CreatedAtUnixNs: edgeUnixNs(ctx)}
		if single != nil {
			d, err = single.CheckItem(ctx, it)
		} else {
			var res []cluster.BatchResult
			res, err = node.CheckBatch(ctx, []cluster.BatchItem{it})
			if err == nil && res[0].Err != nil {
				err = res[0].Err
			}
			if err == nil {
				d = res[0].CheckResult
			}
		}
		if err != nil {
			return Result{}, err
		}
		out := Result{Allowed: d.Allowed, Limit: burst, Window: window(burst, perSec), Remaining: -1, Reset: -1}
		if d.Remaining >= 0 {
			out.Remaining = min(d.Remaining, burst)
			out.Reset = window(burst-out.Remaining, perSec)
		}
		switch {
		case d.Allowed:
		case hits > burst || perSec <= 0:
			out.RetryAfter = -1
		default:
			need := hits
			if out.Remaining >= 0 {
				need = max(hits-out.Remaining, 1)
			}
			out.RetryAfter = window(need, perSec)
		}
		return out, nil
	})
}

// Options configure a Middleware.
type Options struct {
	// Rule is the tokenmesh rule (required).
	Rule string
	// Key is the key template (default "{client_addr}"): literal text and
	// placeholders
	//
	//	{header:NAME}  the request header NAME (first value)
	//	{client_addr}  the client's IP address (from RemoteAddr; put a proxy's
	//	               X-Forwarded-For in a header placeholder if you trust it)
	//	{path:N}       the N-th segment of the URL path, 1-based ("/v1/users/7": {path:3} is "7")
	//	{jwt:CLAIM}    a claim of the bearer JWT in Authorization, NOT verified (see the package doc)
	//	{method}       the request method
	//	{query:NAME}   the URL query parameter NAME; a bare {NAME} (as the config's
	//	               {key}, {tenant}) is the same
	Key string
	// Checker decides (required).
	Checker Checker
	// Hits is the tokens one request takes (default 1).
	Hits int64
	// FailClosed answers 503 when the Checker fails (default: the request
	// goes through, fail open).
	FailClosed bool
	// OnMissingKey, when true, lets a request whose key cannot be formed
	// (a missing header or claim) through unlimited; by default it is
	// answered 400 naming what is missing.
	OnMissingKey bool
	// Timeout bounds one check (default 1s).
	Timeout time.Duration
	// RefusalStatus is the status of a refusal (default 429, Too Many
	// Requests); a 4xx. 403 suits nginx's auth_request, which takes any
	// status of its subrequest but 2xx, 401 and 403 as an error (500).
	RefusalStatus int
	// EdgeHeader names the header a gateway in front puts the time the
	// request reached it in (RequestStartHeader, "X-Request-Start", in the
	// forms ParseRequestStart reads). Empty: the edge is this middleware,
	// and the edge time is when Wrap received the request. Either way the
	// time goes to the Checker in the context (ContextWithEdgeTime); a
	// header that does not parse is ignored (the time of receipt is used)
	// and handed to OnEdgeHeaderError.
	EdgeHeader string
	// Concurrency, when true, limits requests in flight instead of their
	// rate: Rule is a rule of strategy concurrency, each request acquires
	// a permit of its key (Hits is not used) and releases it when the
	// wrapped handler returns (concurrency.go). The Checker must be an
	// Acquirer (GRPC, Local over a *cluster.Node, LocalNode).
	Concurrency bool
	// OnEdgeHeaderError, when set, is called with each request whose
	// EdgeHeader does not parse and the error naming why (for a log line
	// or a counter); nil: such headers are ignored silently.
	OnEdgeHeaderError func(r *http.Request, err error)
}

// Middleware rate limits requests (see the package documentation).
type Middleware struct {
	opts   Options
	key    keytemplate.Func
	policy string // the quoted policy name
}

// New checks opts and parses the key template. Errors name the option.
func New(opts Options) (*Middleware, error) {
	if opts.Rule == "" {
		return nil, errors.New("httplimit: Options.Rule is required")
	}
	if opts.Checker == nil {
		return nil, errors.New("httplimit: Options.Checker is required")
	}
	if opts.Key == "" {
		opts.Key = "{client_addr}"
	}
	if opts.Hits == 0 {
		opts.Hits = 1
	}
	if opts.Hits < 0 {
		return nil, fmt.Errorf("httplimit: Options.Hits: %d is negative", opts.Hits)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = time.Second
	}
	if opts.RefusalStatus == 0 {
		opts.RefusalStatus = http.StatusTooManyRequests
	}
	if opts.RefusalStatus < 400 || opts.RefusalStatus > 499 {
		return nil, fmt.Errorf("httplimit: Options.RefusalStatus: %d is not a 4xx status", opts.RefusalStatus)
	}
	if _, ok := opts.Checker.(Acquirer); opts.Concurrency && !ok {
		return nil, fmt.Errorf("httplimit: Options.Concurrency: the Checker %T cannot acquire permits (use GRPC, Local over a *cluster.Node, or LocalNode)", opts.Checker)
	}
	kf, err := ParseKey(opts.Key)
	if err != nil {
		return nil, fmt.Errorf("httplimit: Options.Key: %w", err)
	}
	return &Middleware{opts: opts, key: kf, policy: strconv.Quote(opts.Rule)}, nil
}

// Wrap returns next behind the limit.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		received := time.Now()
		key, err := m.key(r)
		if err != nil {
			if m.opts.OnMissingKey {
				next.ServeHTTP(w, r)
				return
			}
			http.Error(w, "rate limit key: "+err.Error(), http.StatusBadRequest)
			return
		}
		edge, herr := m.edgeOf(r, received)
		if herr != nil && m.opts.OnEdgeHeaderError != nil {
			m.opts.OnEdgeHeaderError(r, herr)
		}
		ctx, cancel := context.WithTimeout(ContextWithEdgeTime(r.Context(), edge), m.opts.Timeout)
		var (
			res     Result
			release func()
		)
		if m.opts.Concurrency {
			res, release, err = m.opts.Checker.(Acquirer).Acquire(ctx, m.opts.Rule, key)
		} else {
			res, err = m.opts.Checker.Check(ctx, m.opts.Rule, key, m.opts.Hits)
		}
		cancel()
		if release != nil {
			defer release() // the permit is held while next serves the request
		}
		if err != nil {
			if m.opts.FailClosed {
				http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		m.setHeaders(w.Header(), res)
		if !res.Allowed {
			if res.RetryAfter >= 0 {
				w.Header().Set("Retry-After", strconv.FormatInt(ceilSec(res.RetryAfter, 1), 10))
			}
			http.Error(w, http.StatusText(http.StatusTooManyRequests), m.opts.RefusalStatus)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// setHeaders sets RateLimit-Policy and RateLimit.
func (m *Middleware) setHeaders(h http.Header, res Result) {
	pol := m.policy + ";q=" + strconv.FormatInt(res.Limit, 10)
	if res.Window > 0 {
		pol += ";w=" + strconv.FormatInt(ceilSec(res.Window, 1), 10)
	}
	h.Set("RateLimit-Policy", pol)
	rem := max(res.Remaining, 0)
	if !res.Allowed {
		rem = 0
	}
	rl := m.policy + ";r=" + strconv.FormatInt(rem, 10)
	if res.Reset >= 0 {
		rl += ";t=" + strconv.FormatInt(ceilSec(res.Reset, 0), 10)
	}
	h.Set("RateLimit", rl)
}

// ceilSec is d in whole seconds rounded up, at least least.
func ceilSec(d time.Duration, least int64) int64 {
	return max(int64((d+time.Second-1)/time.Second), least)
}

// ParseKey parses a key template (Options.Key) with keytemplate.Parse;
// the error names the bad placeholder.
func ParseKey(tmpl string) (func(r *http.Request) (string, error), error) {
	return keytemplate.Parse(tmpl)
}

// MaxJWTBytes bounds the Authorization header a {jwt:CLAIM} is read from.
const MaxJWTBytes = keytemplate.MaxJWTBytes
