package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Edge times: when a request reached the edge (this middleware, or the
// gateway in front of it), carried to the cluster with the check as
// tokenmesh.v1 CheckItem.created_at_unix_ns (docs/API.md, "Edge times").
// A strategy that orders requests by arrival (owner) counts the check at
// that time, clamped on the node to [now - 100 ms, now]
// (cluster.MaxCreatedAge): two requests of one key that reached the edge
// in one order are decided in that order even when the hop to the
// cluster swaps them. An earlier time never admits more, so a forged one
// only costs its sender. Ours.

// RequestStartHeader is the header gateways put the time a request
// reached them in: nginx `proxy_set_header X-Request-Start "t=${msec}";`,
// HAProxy, Heroku's router, Apache's mod_headers `%t`. ParseRequestStart
// reads its forms.
const RequestStartHeader = "X-Request-Start"

type edgeKey struct{}

// ContextWithEdgeTime returns ctx carrying t, the time the request reached
// the edge; GRPC and Local send it with the check. Wrap sets it for every
// request (Options.EdgeHeader).
func ContextWithEdgeTime(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, edgeKey{}, t)
}

// EdgeTime returns the edge time ctx carries (ContextWithEdgeTime), and
// whether it carries one.
func EdgeTime(ctx context.Context) (time.Time, bool) {
	t, ok := ctx.Value(edgeKey{}).(time.Time)
	return t, ok
}

// edgeUnixNs is ctx's edge time as CheckItem.created_at_unix_ns: 0 (none)
// without one, or for one before 1970.
func edgeUnixNs(ctx context.Context) int64 {
	t, ok := EdgeTime(ctx)
	if !ok || t.IsZero() {
		return 0
	}
	return max(t.UnixNano(), 0)
}

// maxRequestStartDigits bounds the digits ParseRequestStart reads on each
// side of a decimal point: nanoseconds since 1970 have 19 until 2286.
const maxRequestStartDigits = 19

// ParseRequestStart parses an X-Request-Start value: an optional "t="
// then either seconds with a fraction ("t=1700000000.123", nginx's $msec;
// up to nanoseconds) or a whole number of seconds, milliseconds,
// microseconds or nanoseconds since 1970, told apart by size (below 10^11
// seconds, 10^14 milliseconds, 10^17 microseconds, else nanoseconds: every
// time from 1973 to 5138 reads right). Errors name what is wrong: empty,
// not a number, too many digits.
func ParseRequestStart(v string) (time.Time, error) {
	s := strings.TrimPrefix(strings.TrimSpace(v), "t=")
	if s == "" {
		return time.Time{}, errors.New("empty")
	}
	whole, frac, dotted := strings.Cut(s, ".")
	if !digits(whole) || (dotted && !digits(frac)) {
		return time.Time{}, fmt.Errorf("%q is not a time since 1970 (want t=SECONDS.FRACTION or a whole number of s, ms, us or ns)", v)
	}
	if len(whole) > maxRequestStartDigits || len(frac) > maxRequestStartDigits {
		return time.Time{}, fmt.Errorf("%q has more than %d digits", v, maxRequestStartDigits)
	}
	n, err := strconv.ParseUint(whole, 10, 64)
	if err != nil || n > 1<<62 {
		return time.Time{}, fmt.Errorf("%q is out of range", v)
	}
	if dotted {
		if n >= 1e11 {
			return time.Time{}, fmt.Errorf("%q: seconds with a fraction must be below 10^11", v)
		}
		// The fraction to nanoseconds, truncated: "123" is 123,000,000.
		frac = (frac + "000000000")[:9]
		ns, _ := strconv.ParseInt(frac, 10, 64) // 9 digits: cannot fail
		return time.Unix(int64(n), ns), nil
	}
	switch {
	case n < 1e11:
		return time.Unix(int64(n), 0), nil
	case n < 1e14:
		return time.UnixMilli(int64(n)), nil
	case n < 1e17:
		return time.UnixMicro(int64(n)), nil
	default:
		return time.Unix(0, int64(n)), nil
	}
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// edgeOf is the edge time of r, which reached Wrap at received: the
// header's time when Options.EdgeHeader is set and r carries a valid one,
// else received. A malformed header is ignored (the edge time is advisory:
// a gateway's typo must not refuse traffic) and reported by the second
// result for the caller to count.
func (m *Middleware) edgeOf(r *http.Request, received time.Time) (time.Time, error) {
	if m.opts.EdgeHeader == "" {
		return received, nil
	}
	v := r.Header.Get(m.opts.EdgeHeader)
	if v == "" {
		return received, nil
	}
	t, err := ParseRequestStart(v)
	if err != nil {
		return received, fmt.Errorf("%s: %w", m.opts.EdgeHeader, err)
	}
	return t, nil
}
