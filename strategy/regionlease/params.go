// # Parameters
//
// Declared in Params (strategy.ParamSpec); given as NAME=value in a rule's
// params or --param STRATEGY.NAME=value; the generic partition too.
//
//   - period (duration, default 100ms): the time a node's lease from its
//     regional owner is sized for (ask ceil(d*period) tokens); positive.
//   - ttl (duration, default 2*period): a node's lease validity from its ask;
//     at least period.
//   - region_period (duration, default 500ms): the time a region's lease from
//     the global owner is sized for (the regional owner asks
//     ceil(D*region_period) tokens, D the region's demand); positive.
//   - region_ttl (duration, default 3*region_period): a region's lease
//     validity from its ask; at least region_period and at least ttl.
//   - lan_latency (duration, default min(latency_hint, 5ms)): the one-way
//     latency inside a region (the latency hint is the WAN's): a node stops
//     using a lease 2*lan_latency before its end and returns the rest, asks
//     again when its leases would run out within 8*lan_latency (at most ttl),
//     and resends an unanswered ask or return inside its region every
//     4*lan_latency.
//   - idle (duration, default 250ms): a node (or regional owner) returns its
//     unlent leases of a key that saw no request (forward, ask) for this long,
//     or sooner for a key in demand (the time 20 of its measured arrivals
//     take, at least 4*lead): when a tenant's load leaves a region, what it
//     held goes back; positive.
//   - timeout (duration, default 3*latency_hint + 100ms): how long a node
//     waits for a verdict, grant or return acknowledgement (a regional owner
//     for the global owner's too); positive.
//   - retries (int, default 2): retransmissions within timeout; not negative.
//   - on_timeout (admit | reject, default reject): the answer to a forwarded
//     request when no verdict comes within timeout: reject keeps the envelope
//     exactly; admit is unbounded.
//   - min_lease (int, tokens, default 4): a node (or region) asks for leases
//     only when it expects to use at least this many tokens per period (>= 1);
//     below it its requests are forwarded.
//   - window (duration, default 1s): the demand measurement window; positive.
//   - takeover (duration, default region_ttl + 1s): how long a node that
//     becomes a key's global owner (a membership change, a restart) keeps the
//     key's bucket empty: every lease the previous owner granted has ended by
//     then; at least region_ttl.
//   - max_skew (duration, default 100ms): how far in the future a peer's time
//     (arrival, ask) may lie; beyond it the message is refused.
//   - push_every (duration, default latency_hint/8): while a key is contended
//     (its bucket was dry within region_ttl), its global owner pushes, this
//     often, the whole tokens of its bucket to the other regions' regional
//     owners that take pushes, each its share by the demand it reported,
//     without waiting for their asks; 0 turns pushes off; not negative.
//   - region_split (first | share | demand, default demand): while a key is
//     contended (with push_every > 0 only), how its global owner divides the
//     refill between its own region and the pushes to the other regions:
//     first, its region takes the refill as it comes and the pushes split what
//     is left by the demands reported (its region was served first: about 65%
//     of a key's tokens where it offered a third); share, its region takes at
//     most its demand's share of what the bucket holds after each push plus
//     that share of the refill until the next (about s(2-s) of the tokens for
//     a share s; the lowest windowed shortfall); demand, at most its share of
//     the refill plus what the pushes could not place, the pushes splitting
//     the bucket among the other regions by their demands: every region is
//     served by its demand (docs/EVALUATION.md, "regionlease: how evenly a
//     key's regions are served").
//   - push_ahead (duration, default min(latency_hint/2, region_ttl/4)): under
//     region_split=demand (with push_every > 0 only), how far ahead of its
//     refill a contended key's global owner pushes the other regions their
//     share: each push lends the refill up to now + push_ahead, which the
//     holder uses no earlier than that time plus the shortest gap it measured
//     between a push's sending and its receipt (no synchronized clocks needed;
//     with clock_uncertainty > 0, plus at most that), so that no token the
//     owner has made waits in flight across the WAN (docs/EVALUATION.md,
//     "regionlease: dated pushes"); only to regions whose regional owner takes
//     them (a build without them gets pushes of tokens already made); 0 turns
//     it off; at most min(2*latency_hint, region_ttl/4), the time before its
//     end a region stops using a lease; with clock_uncertainty > 0 its default
//     is min(latency_hint, region_ttl/4).
//   - clock_uncertainty (duration, default 0): with dated pushes (push_ahead >
//     0), the most any two nodes' clocks may differ (their wall clocks as NTP,
//     chrony or PTP keep them: the cluster's epoch is read on each node's
//     clock at its start); > 0 lets a region use a dated push's tokens at its
//     usable time plus at most this, rather than plus the shortest gap
//     measured between a push's sending and its receipt (the WAN's shortest
//     delay): on one bucket the tokens then wait that much less, and the
//     default push_ahead becomes latency_hint so that pushes come before their
//     time; trusted, not checked: a region whose clock runs ahead of the
//     global owner's by d more than this uses a push's tokens up to min(d,
//     push_ahead less the WAN's shortest delay) early, and the key may admit
//     up to r times that beyond b + r*T (docs/EVALUATION.md, "regionlease:
//     trusting the clocks"); 0 (the default) trusts no clock; at most
//     max_skew.
//   - outlast (duration, default 2*latency_hint + push_ahead): while a
//     contended key's pushes are dated (push_ahead > 0), its global owner
//     gives no part of the refill to a region whose reserve (the tokens it was
//     lent and did not report used), spent at its demand less its part of the
//     refill, would last longer than the global owner's own region's (the
//     bucket's whole tokens, at its region's demand less its part) by more
//     than this; that part stays in the bucket for the owner's region until
//     the reserves last about as long, so that no region still spends a
//     reserve while another refuses once the key runs dry (docs/EVALUATION.md,
//     "regionlease: regions that outlast G's"); the default covers what a
//     region holds by the owner's count but has not reported used or cannot
//     use yet; 0 turns it off; not negative.
//   - hot_period (duration, default 2*lan_latency): while a key is contended
//     (its global owner's bucket was dry within region_ttl while another
//     region asked within the window; with push_every > 0 only), the global
//     owner lends a node of its own region at most ceil(d*hot_period) tokens
//     (d the demand the node reported; at least 1) instead of its ask
//     (d*period): fewer tokens parked on its region's nodes while the other
//     regions wait; 0 turns it off; not negative.
//   - quantum (duration, default 2*period/5): a node's grant of a contended
//     key, as lease's: when the demands a granter is asked for, scaled to a
//     quantum, exceed what it holds plus what comes in over a quantum (at the
//     global owner, while no other region asks: its bucket's whole tokens and
//     refill, with push_every > 0 only; at a regional owner: its stock and the
//     measured inflow of its stock), the node gets its share of that supply,
//     in proportion to its ask, for a quantum (at least 1 token), and a dry
//     hint to its next turn; short of that, a grant is cut to the node's
//     demand until the granter runs dry; 0 turns both off; not negative.
//   - hold (duration, default min(latency_hint + 2*lan_latency, timeout/2)):
//     the global owner's ordering buffer of a key no region holds a stock of
//     (a rate too low for stocks: r * 2*latency_hint below min_lease), while
//     no lease is out of its bucket: its requests (its own, its region's
//     forwards, the other regions' relays) wait until arrival + hold and are
//     decided in arrival order (then by the receiving node's request id), as
//     owner's; one that comes later is decided at once from what the bucket
//     held since its arrival; 0 turns the rule off (every request decided at
//     receipt, and a region may hold a stock at any rate); at most timeout.
//   - replicas (int, default 1): the global owner lends a key's tokens only
//     under a fence (no lease ends after it) acknowledged by the key's first K
//     successors in rendezvous order, and by the first successor in another
//     region when none of them is; the successor that takes the key over after
//     a crash refills from that fence instead of waiting the whole takeover; 0
//     turns replicas off (every takeover waits takeover); 0 to 8.
package regionlease

import "github.com/tokenmesh/tokenmesh/strategy"

// Params declares regionlease's parameters (strategy.ParamSpec), read by
// config validation, --param and `tokenmesh strategies`; New reads them
// (strategy.ReadParams). The generic partition parameter applies too
// (available or conserve; see "# Cuts" in the package doc).
var Params = []strategy.ParamSpec{
	{Name: "period", Type: strategy.ParamDuration, Default: "100ms", Example: "250ms",
		Doc: "the time a node's lease from its regional owner is sized for (ask ceil(d*period) tokens); positive."},
	{Name: "ttl", Type: strategy.ParamDuration, Default: "2*period", Example: "500ms",
		Doc: "a node's lease validity from its ask; at least period."},
	{Name: "region_period", Type: strategy.ParamDuration, Default: "500ms", Example: "1s",
		Doc: "the time a region's lease from the global owner is sized for (the regional owner asks ceil(D*region_period) tokens, D the region's demand); positive."},
	{Name: "region_ttl", Type: strategy.ParamDuration, Default: "3*region_period", Example: "2s",
		Doc: "a region's lease validity from its ask; at least region_period and at least ttl."},
	{Name: "lan_latency", Type: strategy.ParamDuration, Default: "min(latency_hint, 5ms)", Example: "1ms",
		Doc: "the one-way latency inside a region (the latency hint is the WAN's): a node stops using a lease 2*lan_latency before its end and returns the rest, asks again when its leases would run out within 8*lan_latency (at most ttl), and resends an unanswered ask or return inside its region every 4*lan_latency."},
	{Name: "idle", Type: strategy.ParamDuration, Default: "250ms", Example: "1s",
		Doc: "a node (or regional owner) returns its unlent leases of a key that saw no request (forward, ask) for this long, or sooner for a key in demand (the time 20 of its measured arrivals take, at least 4*lead): when a tenant's load leaves a region, what it held goes back; positive."},
	{Name: "timeout", Type: strategy.ParamDuration, Default: "3*latency_hint + 100ms", Example: "500ms",
		Doc: "how long a node waits for a verdict, grant or return acknowledgement (a regional owner for the global owner's too); positive."},
	{Name: "retries", Type: strategy.ParamInt, Default: "2", Example: "3",
		Doc: "retransmissions within timeout; not negative."},
	{Name: "on_timeout", Type: strategy.ParamEnum, Enum: []string{"admit", "reject"}, Default: "reject", Example: "admit",
		Doc: "the answer to a forwarded request when no verdict comes within timeout: reject keeps the envelope exactly; admit is unbounded."},
	{Name: "min_lease", Type: strategy.ParamInt, Unit: "tokens", Default: "4", Example: "8",
		Doc: "a node (or region) asks for leases only when it expects to use at least this many tokens per period (>= 1); below it its requests are forwarded."},
	{Name: "window", Type: strategy.ParamDuration, Default: "1s", Example: "2s",
		Doc: "the demand measurement window; positive."},
	{Name: "takeover", Type: strategy.ParamDuration, Default: "region_ttl + 1s", Example: "5s",
		Doc: "how long a node that becomes a key's global owner (a membership change, a restart) keeps the key's bucket empty: every lease the previous owner granted has ended by then; at least region_ttl."},
	{Name: "max_skew", Type: strategy.ParamDuration, Default: "100ms", Example: "200ms",
		Doc: "how far in the future a peer's time (arrival, ask) may lie; beyond it the message is refused."},
	{Name: "push_every", Type: strategy.ParamDuration, Default: "latency_hint/8", Example: "20ms",
		Doc: "while a key is contended (its bucket was dry within region_ttl), its global owner pushes, this often, the whole tokens of its bucket to the other regions' regional owners that take pushes, each its share by the demand it reported, without waiting for their asks; 0 turns pushes off; not negative."},
	{Name: "region_split", Type: strategy.ParamEnum, Enum: []string{"first", "share", "demand"}, Default: "demand", Example: "share",
		Doc: "while a key is contended (with push_every > 0 only), how its global owner divides the refill between its own region and the pushes to the other regions: first, its region takes the refill as it comes and the pushes split what is left by the demands reported (its region was served first: about 65% of a key's tokens where it offered a third); share, its region takes at most its demand's share of what the bucket holds after each push plus that share of the refill until the next (about s(2-s) of the tokens for a share s; the lowest windowed shortfall); demand, at most its share of the refill plus what the pushes could not place, the pushes splitting the bucket among the other regions by their demands: every region is served by its demand (docs/EVALUATION.md, \"regionlease: how evenly a key's regions are served\")."},
	{Name: "push_ahead", Type: strategy.ParamDuration, Default: "min(latency_hint/2, region_ttl/4)", Example: "5ms",
		Doc: "under region_split=demand (with push_every > 0 only), how far ahead of its refill a contended key's global owner pushes the other regions their share: each push lends the refill up to now + push_ahead, which the holder uses no earlier than that time plus the shortest gap it measured between a push's sending and its receipt (no synchronized clocks needed; with clock_uncertainty > 0, plus at most that), so that no token the owner has made waits in flight across the WAN (docs/EVALUATION.md, \"regionlease: dated pushes\"); only to regions whose regional owner takes them (a build without them gets pushes of tokens already made); 0 turns it off; at most min(2*latency_hint, region_ttl/4), the time before its end a region stops using a lease; with clock_uncertainty > 0 its default is min(latency_hint, region_ttl/4)."},
	{Name: "clock_uncertainty", Type: strategy.ParamDuration, Default: "0", Example: "5ms",
		Doc: "with dated pushes (push_ahead > 0), the most any two nodes' clocks may differ (their wall clocks as NTP, chrony or PTP keep them: the cluster's epoch is read on each node's clock at its start); > 0 lets a region use a dated push's tokens at its usable time plus at most this, rather than plus the shortest gap measured between a push's sending and its receipt (the WAN's shortest delay): on one bucket the tokens then wait that much less, and the default push_ahead becomes latency_hint so that pushes come before their time; trusted, not checked: a region whose clock runs ahead of the global owner's by d more than this uses a push's tokens up to min(d, push_ahead less the WAN's shortest delay) early, and the key may admit up to r times that beyond b + r*T (docs/EVALUATION.md, \"regionlease: trusting the clocks\"); 0 (the default) trusts no clock; at most max_skew."},
	{Name: "outlast", Type: strategy.ParamDuration, Default: "2*latency_hint + push_ahead", Example: "500ms",
		Doc: "while a contended key's pushes are dated (push_ahead > 0), its global owner gives no part of the refill to a region whose reserve (the tokens it was lent and did not report used), spent at its demand less its part of the refill, would last longer than the global owner's own region's (the bucket's whole tokens, at its region's demand less its part) by more than this; that part stays in the bucket for the owner's region until the reserves last about as long, so that no region still spends a reserve while another refuses once the key runs dry (docs/EVALUATION.md, \"regionlease: regions that outlast G's\"); the default covers what a region holds by the owner's count but has not reported used or cannot use yet; 0 turns it off; not negative."},
	{Name: "hot_period", Type: strategy.ParamDuration, Default: "2*lan_latency", Example: "20ms",
		Doc: "while a key is contended (its global owner's bucket was dry within region_ttl while another region asked within the window; with push_every > 0 only), the global owner lends a node of its own region at most ceil(d*hot_period) tokens (d the demand the node reported; at least 1) instead of its ask (d*period): fewer tokens parked on its region's nodes while the other regions wait; 0 turns it off; not negative."},
	{Name: "quantum", Type: strategy.ParamDuration, Default: "2*period/5", Example: "20ms",
		Doc: "a node's grant of a contended key, as lease's: when the demands a granter is asked for, scaled to a quantum, exceed what it holds plus what comes in over a quantum (at the global owner, while no other region asks: its bucket's whole tokens and refill, with push_every > 0 only; at a regional owner: its stock and the measured inflow of its stock), the node gets its share of that supply, in proportion to its ask, for a quantum (at least 1 token), and a dry hint to its next turn; short of that, a grant is cut to the node's demand until the granter runs dry; 0 turns both off; not negative."},
	{Name: "hold", Type: strategy.ParamDuration, Default: "min(latency_hint + 2*lan_latency, timeout/2)", Example: "100ms",
		Doc: "the global owner's ordering buffer of a key no region holds a stock of (a rate too low for stocks: r * 2*latency_hint below min_lease), while no lease is out of its bucket: its requests (its own, its region's forwards, the other regions' relays) wait until arrival + hold and are decided in arrival order (then by the receiving node's request id), as owner's; one that comes later is decided at once from what the bucket held since its arrival; 0 turns the rule off (every request decided at receipt, and a region may hold a stock at any rate); at most timeout."},
	{Name: "replicas", Type: strategy.ParamInt, Default: "1", Example: "2",
		Doc: "the global owner lends a key's tokens only under a fence (no lease ends after it) acknowledged by the key's first K successors in rendezvous order, and by the first successor in another region when none of them is; the successor that takes the key over after a crash refills from that fence instead of waiting the whole takeover; 0 turns replicas off (every takeover waits takeover); 0 to 8."},
}
