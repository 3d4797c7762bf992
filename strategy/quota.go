package strategy

import (
	"fmt"
	"time"
	"unicode/utf8"
)

// QuotaClient numbers a quota client (one Envoy proxy's RLQS stream) among
// those attached to one node; the node's driver assigns it and never reuses
// one while the node runs. 0 is not a client.
type QuotaClient uint64

// QuotaUsage is one quota client's usage report for one key (an RLQS
// BucketQuotaUsage): the requests it allowed and denied since its previous
// report, over Elapsed (0 on a client's first report of the key, as Envoy
// sends it).
type QuotaUsage struct {
	Client  QuotaClient
	Key     string
	Allowed int64
	Denied  int64
	Elapsed time.Duration
	// ID is the client's own identity, the same on every stream it opens
	// (RLQS: the stream's tokenmesh-client-id header, which operators set
	// per Envoy through grpc_service.initial_metadata); "" when it sent
	// none. A strategy may treat a new stream with the ID of a client whose
	// stream ended as that client (strategy/quota # Client ids). At most
	// MaxQuotaClientIDBytes bytes of UTF-8.
	ID string
}

// MaxQuotaClientIDBytes bounds QuotaUsage.ID.
const MaxQuotaClientIDBytes = 128

// MaxQuotaReport bounds Allowed and Denied of one report (2^40 requests),
// so that demand arithmetic on peer input cannot overflow.
const MaxQuotaReport = 1 << 40

// MaxQuotaElapsed bounds a report's Elapsed (a day).
const MaxQuotaElapsed = 24 * time.Hour

// Validate reports a zero client, a key that is empty, longer than
// MaxKeyStateBytes or not valid UTF-8, counts outside [0, MaxQuotaReport],
// an Elapsed outside [0, MaxQuotaElapsed], or an ID longer than
// MaxQuotaClientIDBytes or not valid UTF-8.
func (u QuotaUsage) Validate() error {
	switch {
	case u.Client == 0:
		return fmt.Errorf("quota usage: client 0")
	case u.Key == "":
		return fmt.Errorf("quota usage: empty key")
	case len(u.Key) > MaxKeyStateBytes:
		return fmt.Errorf("quota usage: key of %d bytes is above the limit of %d", len(u.Key), MaxKeyStateBytes)
	case !utf8.ValidString(u.Key):
		return fmt.Errorf("quota usage: key %q is not valid UTF-8", u.Key)
	case u.Allowed < 0 || u.Allowed > MaxQuotaReport || u.Denied < 0 || u.Denied > MaxQuotaReport:
		return fmt.Errorf("quota usage of %q: allowed %d, denied %d outside [0, %d]", u.Key, u.Allowed, u.Denied, int64(MaxQuotaReport))
	case u.Elapsed < 0 || u.Elapsed > MaxQuotaElapsed:
		return fmt.Errorf("quota usage of %q: elapsed %v outside [0, %v]", u.Key, u.Elapsed, MaxQuotaElapsed)
	case len(u.ID) > MaxQuotaClientIDBytes || !utf8.ValidString(u.ID):
		return fmt.Errorf("quota usage of %q: client id of %d bytes above %d or not valid UTF-8", u.Key, len(u.ID), MaxQuotaClientIDBytes)
	}
	return nil
}

// QuotaAssignment is a token bucket a quota client is to enforce for Key
// (an RLQS BucketAction's token_bucket, Envoy's TokenBucket): MaxTokens
// tokens of burst, refilled with TokensPerFill tokens every FillInterval
// (whole seconds), valid for TTL (whole seconds) from its receipt. TTL 0
// withdraws the assignment (the client falls back to its
// expired_assignment_behavior). MaxTokens and TokensPerFill both 0 with a
// TTL is a DENY_ALL blanket rule (DenyAll): the client refuses every
// request until the TTL ends or another assignment replaces it (Envoy
// starts the token bucket that follows a blanket rule full).
type QuotaAssignment struct {
	Client        QuotaClient
	Key           string
	MaxTokens     int64
	TokensPerFill int64
	FillInterval  time.Duration
	TTL           time.Duration
	// Seq is the strategy's own number for the assignment, handed back in
	// Quoter.Delivered; drivers do not interpret it.
	Seq uint64
	// Abandon tells the client to forget Key (an RLQS AbandonAction): its
	// share was taken back because its reports showed no requests for a
	// while; its next request for Key starts the bucket anew (Envoy then
	// reports it at once). The token bucket fields are unset.
	Abandon bool
}

// DenyAll reports whether a is a DENY_ALL blanket rule (see
// QuotaAssignment).
func (a QuotaAssignment) DenyAll() bool {
	return !a.Abandon && a.TTL > 0 && a.MaxTokens == 0 && a.TokensPerFill == 0
}

// Same reports whether a and b are the same token bucket (Envoy compares
// max_tokens, tokens_per_fill and fill_interval; a resend of the same
// bucket only renews its TTL).
func (a QuotaAssignment) Same(b QuotaAssignment) bool {
	return a.MaxTokens == b.MaxTokens && a.TokensPerFill == b.TokensPerFill && a.FillInterval == b.FillInterval
}

// Quoter is implemented by strategies that hand token-bucket assignments
// to quota clients attached to this node (Envoy proxies over the Rate
// Limit Quota Service), each a share of the key's one (r, b). The driver
// reports what its clients send; the strategy answers, in Effects.Quotas,
// with the assignments to push to them, now or in a later call. Ours.
type Quoter interface {
	// Usage handles one client's report. Errors: a report that does not
	// validate (QuotaUsage.Validate); it changes nothing.
	Usage(now time.Duration, u QuotaUsage, fx *Effects) error
	// Detach says that client's stream ended (or it abandoned key; key ""
	// for every key): its assignments are no longer renewed.
	Detach(now time.Duration, client QuotaClient, key string, fx *Effects)
	// Delivered says assignment a (as Effects.Quotas carried it) was
	// written to its client's live stream. An assignment never confirmed
	// is assumed to be still unapplied until the one it replaced expired.
	Delivered(now time.Duration, a QuotaAssignment, fx *Effects)
}

// Assign queues an assignment for a client attached to this node.
func (fx *Effects) Assign(a QuotaAssignment) { fx.Quotas = append(fx.Quotas, a) }
