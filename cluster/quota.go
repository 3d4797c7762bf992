package cluster

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// QuotaSink receives the token-bucket assignments a rule's strategy (a
// strategy.Quoter, such as quota) makes for quota clients attached to
// this node, to push to them (the RLQS server). It is called from the
// node's goroutine: it must not block or call the Node.
type QuotaSink func(rule string, a strategy.QuotaAssignment)

// quotaCall is an evQuota event: a client's report, its detach, or the
// confirmation that an assignment reached its stream.
type quotaCall struct {
	usage     strategy.QuotaUsage
	detach    bool
	delivered *strategy.QuotaAssignment
	err       error // set by the loop before done
}

// SetQuotaSink sets where assignments go (nil: dropped). Safe at any time.
func (n *Node) SetQuotaSink(f QuotaSink) {
	if f == nil {
		n.quotaSink.Store(nil)
		return
	}
	n.quotaSink.Store(&f)
}

// NewQuotaClient numbers a new quota client of this node (an RLQS
// stream): unique for the node's life, never 0.
func (n *Node) NewQuotaClient() strategy.QuotaClient {
	return strategy.QuotaClient(n.quotaClients.Add(1))
}

// QuotaUsage hands a client's usage report for rule to its strategy and
// waits until it is handled; the assignments it causes go to the sink.
// Errors: an unknown rule, a rule whose strategy serves no quota clients
// (host.ErrNotQuoter), a report that does not validate, ErrClosed,
// ctx.Err().
func (n *Node) QuotaUsage(ctx context.Context, rule string, u strategy.QuotaUsage) error {
	rs, ok := (*n.rulesView.Load())[rule]
	if !ok {
		return fmt.Errorf("cluster: rule %q is not defined on node %s", rule, n.self)
	}
	if err := u.Validate(); err != nil {
		return fmt.Errorf("cluster: rule %q: %w", rule, err)
	}
	qc := &quotaCall{usage: u}
	if err := n.call(ctx, event{kind: evQuota, rule: rs, quota: qc}); err != nil {
		return err
	}
	if qc.err != nil {
		return fmt.Errorf("cluster: rule %q: %w", rule, qc.err)
	}
	return nil
}

// QuotaDetach tells rule's strategy that client's stream ended (key "")
// or that it abandoned key. Errors: an unknown rule, ErrClosed,
// ctx.Err().
func (n *Node) QuotaDetach(ctx context.Context, rule string, client strategy.QuotaClient, key string) error {
	rs, ok := (*n.rulesView.Load())[rule]
	if !ok {
		return fmt.Errorf("cluster: rule %q is not defined on node %s", rule, n.self)
	}
	qc := &quotaCall{usage: strategy.QuotaUsage{Client: client, Key: key}, detach: true}
	return n.call(ctx, event{kind: evQuota, rule: rs, quota: qc})
}

// QuotaDelivered tells rule's strategy that assignment a (as the quota
// sink got it) was written to its client's live stream. Errors: an
// unknown rule, ErrClosed, ctx.Err().
func (n *Node) QuotaDelivered(ctx context.Context, rule string, a strategy.QuotaAssignment) error {
	rs, ok := (*n.rulesView.Load())[rule]
	if !ok {
		return fmt.Errorf("cluster: rule %q is not defined on node %s", rule, n.self)
	}
	return n.call(ctx, event{kind: evQuota, rule: rs, quota: &quotaCall{delivered: &a}})
}

// handleQuota runs an evQuota event in the loop. A rule reloaded away
// meanwhile (rs no longer current) is an error.
func (n *Node) handleQuota(now time.Duration, ev event) {
	rs, qc := ev.rule, ev.quota
	if cur, ok := n.rules[rs.rule.Name]; !ok || cur != rs {
		qc.err = fmt.Errorf("rule %q was reloaded meanwhile", rs.rule.Name)
		return
	}
	if qc.detach {
		n.h.Detach(now, rs.idx, qc.usage.Client, qc.usage.Key)
		return
	}
	if qc.delivered != nil {
		n.h.Delivered(now, rs.idx, *qc.delivered)
		return
	}
	qc.err = n.h.Usage(now, rs.idx, qc.usage)
}

// Assigned hands an assignment to the quota sink (host.QuotaDriver).
func (ld loopDriver) Assigned(rule int, a strategy.QuotaAssignment) {
	if f := ld.n.quotaSink.Load(); f != nil {
		(*f)(ld.n.order[rule].rule.Name, a)
	}
}

// quotaState is the Node's part for quota clients.
type quotaState struct {
	quotaSink    atomic.Pointer[QuotaSink]
	quotaClients atomic.Uint64
}
