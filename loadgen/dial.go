package loadgen

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	tokenmeshv1 "github.com/tokenmesh/tokenmesh/api/tokenmesh/v1"
)

// Dial connects to every target (ConnsPerTarget connections each) and
// checks, with ListRules, that each answers and has rule; it returns the
// connections, indexed [target][conn], and the rule's limit as the first
// target reports it. Close the connections when done.
func dial(ctx context.Context, o *Options) (conns [][]*grpc.ClientConn, rate float64, burst int64, err error) {
	creds := insecure.NewCredentials()
	if o.TLS != nil {
		creds = credentials.NewTLS(o.TLS)
	}
	n := max(o.ConnsPerTarget, 1)
	d := &dialer{ctx: ctx, o: o, timeout: o.DialTimeout}
	if d.timeout <= 0 {
		d.timeout = 5 * time.Second
	}
	for ti, t := range o.Targets {
		cs := make([]*grpc.ClientConn, 0, n)
		for range n {
			c, err := grpc.NewClient(t, grpc.WithTransportCredentials(creds))
			if err != nil {
				d.closeAll()
				return nil, 0, 0, &TargetError{t, err}
			}
			cs = append(cs, c)
		}
		d.conns = append(d.conns, cs)
		var r float64
		var b int64
		switch o.API {
		case APIRLS:
			err = d.probeRLS(t, cs)
		case APIGubernator:
			r, b, err = d.probeGubernator(t, cs)
		default:
			r, b, err = d.probeTokenmesh(t, cs, ti == 0)
		}
		if err != nil {
			return nil, 0, 0, err
		}
		if ti == 0 {
			rate, burst = r, b
		}
	}
	return d.conns, rate, burst, nil
}

// dialer is dial's state: the connections so far, closed on a failure.
type dialer struct {
	ctx     context.Context
	o       *Options
	timeout time.Duration // of one probe
	conns   [][]*grpc.ClientConn
}

// closeAll closes every connection.
func (d *dialer) closeAll() {
	for _, cs := range d.conns {
		for _, c := range cs {
			_ = c.Close()
		}
	}
}

// unanswered closes everything and reports target t's probe failure
// (what did not answer there), or ctx's end.
func (d *dialer) unanswered(t, what string, err error) error {
	d.closeAll()
	if d.ctx.Err() != nil {
		return d.ctx.Err()
	}
	return &TargetError{t, fmt.Errorf("%s: %v", what, err)}
}

// probeRLS checks that target t answers on each of cs: Envoy's RLS has no
// rule listing, so one request of the domain (a key of its own) shows it.
func (d *dialer) probeRLS(t string, cs []*grpc.ClientConn) error {
	o := d.o
	for _, c := range cs {
		cctx, cancel := context.WithTimeout(d.ctx, d.timeout)
		_, err := rlsv3.NewRateLimitServiceClient(c).ShouldRateLimit(cctx, &rlsv3.RateLimitRequest{Domain: o.Domain,
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: o.descriptorKey(), Value: "loadgen-probe"}}}}})
		cancel()
		if err != nil {
			return d.unanswered(t, "no Envoy rate limit service answers there", err)
		}
	}
	return nil
}

// probeGubernator checks that target t answers on each of cs (one rate
// limit of a key of its own) and returns the limit Options.Gubernator
// sets.
func (d *dialer) probeGubernator(t string, cs []*grpc.ClientConn) (rate float64, burst int64, err error) {
	o := d.o
	probe := newGubRequest(o.Rule, *o.Gubernator, 1, 1)
	probe.keys[0] = "loadgen-probe"
	probe.encode()
	for _, c := range cs {
		var presp gubResponse
		cctx, cancel := context.WithTimeout(d.ctx, d.timeout)
		err := c.Invoke(cctx, gubernatorGetRateLimits, probe, &presp, grpc.ForceCodec(gubCodec{}))
		cancel()
		if err == nil && presp.items != 1 {
			err = fmt.Errorf("%d rate limits in the answer to 1", presp.items)
		}
		if err != nil {
			return 0, 0, d.unanswered(t, "no Gubernator V1 service answers there", err)
		}
	}
	rate, burst = float64(o.Gubernator.Limit)/o.Gubernator.Duration.Seconds(), o.Gubernator.Limit
	if o.Gubernator.Burst > 0 {
		burst = o.Gubernator.Burst
	}
	return rate, burst, nil
}

// probeTokenmesh checks, with ListRules, that target t answers on each of
// cs and has the rule; it returns the rule's limit (as the first
// connection reports it, when first).
func (d *dialer) probeTokenmesh(t string, cs []*grpc.ClientConn, first bool) (rate float64, burst int64, err error) {
	o := d.o
	for _, c := range cs {
		cctx, cancel := context.WithTimeout(d.ctx, d.timeout)
		resp, err := tokenmeshv1.NewRateLimitServiceClient(c).ListRules(cctx, &tokenmeshv1.ListRulesRequest{})
		cancel()
		if err != nil {
			return 0, 0, d.unanswered(t, fmt.Sprintf("no tokenmesh gRPC API answers there (is `tokenmesh serve` running with node.grpc_addr %s?)", t), err)
		}
		var names []string
		found := false
		for _, r := range resp.GetRules() {
			names = append(names, r.GetName())
			if r.GetName() == o.Rule {
				found = true
				if first {
					rate, burst = r.GetLimitPerS(), r.GetBurst()
				}
			}
		}
		if !found {
			d.closeAll()
			return 0, 0, &TargetError{t, fmt.Errorf("rule %q is not a rule of this node (it has: %s)", o.Rule, strings.Join(names, ", "))}
		}
	}
	return rate, burst, nil
}
