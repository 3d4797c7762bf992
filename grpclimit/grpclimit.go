// Package grpclimit is a gRPC server interceptor that limits the calls of
// a Go service with a tokenmesh rule, as httplimit does for net/http: it
// takes each call's key from the call (its metadata, the peer's address,
// the method, a JWT claim) by the key templates httplimit uses, asks a
// httplimit.Checker (a tokenmesh cluster over gRPC, httplimit.GRPC, or an
// in-process node, httplimit.LocalNode) and answers a refusal itself with
// RESOURCE_EXHAUSTED.
//
//	lim, err := grpclimit.New(grpclimit.Options{Rule: "api", Key: "{header:x-api-key}",
//	        Checker: httplimit.GRPC(tokenmeshv1.NewRateLimitServiceClient(conn))})
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(lim.Unary()), grpc.ChainStreamInterceptor(lim.Stream()))
//
// Two kinds of rule:
//   - a rate rule (every strategy but concurrency): each call takes Hits
//     tokens of its key;
//   - a concurrency rule (Options.Concurrency; strategy concurrency: at most
//     N calls of a key in flight across the cluster, the throttling
//     article's "concurrency" limit, seed 003): each call holds a permit of
//     its key while the handler runs (a stream: until the handler returns),
//     released when it returns.
//
// Key templates (httplimit/keytemplate), read from the call as from an
// HTTP request whose headers are the call's incoming metadata:
//
//	{header:NAME}  the metadata entry NAME (first value; gRPC metadata keys are lower case)
//	{client_addr}  the peer's IP address
//	{method}       the full method name, "/pkg.Service/Method"
//	{path:N}       the N-th segment of the full method: {path:1} the service, {path:2} the method
//	{jwt:CLAIM}    a claim of the bearer JWT in the "authorization" metadata, NOT verified
//
// A refusal is status RESOURCE_EXHAUSTED whose message names the rule
// and key, with the response headers (gRPC header metadata) ratelimit-policy
// and ratelimit as httplimit writes them, and retry-after (whole seconds) when
// known. A call whose key cannot be formed is INVALID_ARGUMENT naming the
// missing part (or goes through with Options.OnMissingKey); a Checker
// that fails lets the call through (fail open) unless Options.FailClosed
// (then UNAVAILABLE).
package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/tokenmesh/tokenmesh/httplimit"
	"github.com/tokenmesh/tokenmesh/httplimit/keytemplate"
)

// Options configure an Interceptor.
type Options struct {
	// Rule is the tokenmesh rule (required).
	Rule string
	// Key is the key template (default "{client_addr}"; see the package
	// documentation).
	Key string
	// Checker decides (required); with Concurrency it must be an
	// httplimit.Acquirer (GRPC, Local over a *cluster.Node, LocalNode).
	Checker httplimit.Checker
	// Hits is the tokens one call takes under a rate rule (default 1).
	Hits int64
	// Concurrency: Rule is a rule of strategy concurrency; each call holds
	// a permit of its key while its handler runs.
	Concurrency bool
	// FailClosed answers UNAVAILABLE when the Checker fails (default: the
	// call goes through).
	FailClosed bool
	// OnMissingKey lets a call whose key cannot be formed through
	// unlimited (default: INVALID_ARGUMENT naming what is missing).
	OnMissingKey bool
	// Timeout bounds one decision (default 1s).
	Timeout time.Duration
	// Skip, when set, exempts the calls whose full method it returns true
	// for (health checks, reflection).
	Skip func(fullMethod string) bool
}

// Interceptor limits calls (see the package documentation).
type Interceptor struct {
	opts Options
	key  keytemplate.Func
}

// New checks opts and parses the key template. Errors name the option: a
// missing Rule or Checker, negative Hits, a Checker that cannot acquire
// permits with Concurrency, a key template that does not parse.
func New(opts Options) (*Interceptor, error) {
	switch {
	case opts.Rule == "":
		return nil, errors.New("grpclimit: Options.Rule is required")
	case opts.Checker == nil:
		return nil, errors.New("grpclimit: Options.Checker is required")
	case opts.Hits < 0:
		return nil, fmt.Errorf("grpclimit: Options.Hits: %d is negative", opts.Hits)
	}
	if _, ok := opts.Checker.(httplimit.Acquirer); opts.Concurrency && !ok {
		return nil, fmt.Errorf("grpclimit: Options.Concurrency: the Checker %T cannot acquire permits (use httplimit.GRPC, Local over a *cluster.Node, or LocalNode)", opts.Checker)
	}
	if opts.Key == "" {
		opts.Key = "{client_addr}"
	}
	if opts.Hits == 0 {
		opts.Hits = 1
	}
	if opts.Timeout <= 0 {
		opts.Timeout = time.Second
	}
	kf, err := keytemplate.Parse(opts.Key)
	if err != nil {
		return nil, fmt.Errorf("grpclimit: Options.Key: %w", err)
	}
	return &Interceptor{opts: opts, key: kf}, nil
}

// Unary is the interceptor for unary calls.
func (l *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		release, err := l.admit(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		defer release()
		return handler(ctx, req)
	}
}

// Stream is the interceptor for streaming calls: one decision per stream,
// when it opens (a concurrency permit is held until the handler returns).
func (l *Interceptor) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		release, err := l.admit(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		defer release()
		return handler(srv, ss)
	}
}

func nothing() {}

// admit decides one call: a release func (nothing to release under a rate
// rule) or the status error that answers the call.
func (l *Interceptor) admit(ctx context.Context, method string) (func(), error) {
	if l.opts.Skip != nil && l.opts.Skip(method) {
		return nothing, nil
	}
	key, err := l.key(asRequest(ctx, method))
	if err != nil {
		if l.opts.OnMissingKey {
			return nothing, nil
		}
		return nil, status.Errorf(codes.InvalidArgument, "rate limit key: %v", err)
	}
	dctx, cancel := context.WithTimeout(ctx, l.opts.Timeout)
	defer cancel()
	var (
		res     httplimit.Result
		release func()
	)
	if l.opts.Concurrency {
		res, release, err = l.opts.Checker.(httplimit.Acquirer).Acquire(dctx, l.opts.Rule, key)
	} else {
		res, err = l.opts.Checker.Check(dctx, l.opts.Rule, key, l.opts.Hits)
	}
	if err != nil {
		if l.opts.FailClosed {
			return nil, status.Errorf(codes.Unavailable, "rate limiter unavailable: %v", err)
		}
		return nothing, nil
	}
	l.setHeaders(ctx, res)
	if !res.Allowed {
		what := "rate limit"
		if l.opts.Concurrency {
			what = "concurrency limit"
		}
		return nil, status.Errorf(codes.ResourceExhausted, "%s of rule %q reached for key %q", what, l.opts.Rule, key)
	}
	if release == nil {
		release = nothing
	}
	return release, nil
}

// setHeaders sends ratelimit-policy, ratelimit and (refusals) retry-after
// as header metadata, in httplimit's format (draft-ietf-httpapi-ratelimit-headers).
func (l *Interceptor) setHeaders(ctx context.Context, res httplimit.Result) {
	pol := strconv.Quote(l.opts.Rule) + ";q=" + strconv.FormatInt(res.Limit, 10)
	if res.Window > 0 {
		pol += ";w=" + strconv.FormatInt(ceilSec(res.Window, 1), 10)
	}
	rem := max(res.Remaining, 0)
	if !res.Allowed {
		rem = 0
	}
	rl := strconv.Quote(l.opts.Rule) + ";r=" + strconv.FormatInt(rem, 10)
	if res.Reset >= 0 {
		rl += ";t=" + strconv.FormatInt(ceilSec(res.Reset, 0), 10)
	}
	md := metadata.Pairs("ratelimit-policy", pol, "ratelimit", rl)
	if !res.Allowed && res.RetryAfter >= 0 {
		md.Append("retry-after", strconv.FormatInt(ceilSec(res.RetryAfter, 1), 10))
	}
	_ = grpc.SetHeader(ctx, md) // fails only outside a server call or after the headers were sent
}

func ceilSec(d time.Duration, least int64) int64 {
	return max(int64((d+time.Second-1)/time.Second), least)
}

// asRequest is the call as the key templates read it: an HTTP request
// with the incoming metadata as headers, the full method as method and
// path, the peer's address as RemoteAddr.
func asRequest(ctx context.Context, method string) *http.Request {
	r := &http.Request{Method: method, URL: &url.URL{Path: method}, Header: http.Header{}}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		for k, vs := range md {
			r.Header[http.CanonicalHeaderKey(k)] = vs
		}
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		r.RemoteAddr = p.Addr.String()
	}
	return r
}
