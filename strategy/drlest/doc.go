// Package drlest implements the estimation-based distributed rate limiting
// baselines that GDRL (Stanojević & Shorten, "Generalized Distributed Rate
// Limiting") §I-C reviews and compares itself with: Global Random Drop
// (strategy `grd`) and Flow Proportional Share (strategy `fps`), from
// Raghavan et al., "Cloud Control with Distributed Rate Limiting" (ACM
// SIGCOMM 2007, GDRL's reference [29]). They are here to be measured
// against gdrl, static and central in `tokenmesh sim`, not to be deployed:
// neither keeps the envelope b + r*T.
//
// # What both do (GDRL §I-C)
//
// "Each local limiter tracks its demand and broadcasts that information";
// every node sums the estimates it holds into the key's total demand T.
// Here a node counts the tokens requested of each key in each interval
// (parameter interval, default 500 ms), filters the interval's rate with a
// low pass, d <- alpha * count/interval + (1 - alpha) * d (the estimator
// GDRL §IV uses for its own indicator; parameter alpha, default 0.5), and
// at the end of every interval sends its estimates of the keys with demand
// to every other live member (DrlEstReport). A peer's estimate counts
// until it is stale (three intervals without a report of the key from that
// peer) or the peer leaves the view.
//
// # grd: Global Random Drop
//
// "The total demand T is computed as a sum of demands at all limiters and
// an arriving packet is dropped with probability (T - C)/T." C is the
// rule's rate r. A request (of any number of tokens) is admitted when T <=
// C, else with probability C/T, drawn from the node's seeded Rand. There is
// no bucket: the burst b plays no part, so a key's first interval (T still
// 0) and any burst shorter than the estimator's lag are admitted whole.
// GDRL quotes Raghavan et al.: "beyond 50 limiters, GRD fails to limit
// aggregate rate" (its dependence on swiftly converging estimates).
//
// # fps: Flow Proportional Share
//
// "FPS works similarly, using the notion of node's weight that is
// broadcasted ... each node utilizes this aggregate-weight information to
// adapt its behavior." Raghavan et al.'s weights count TCP flows; for
// request traffic (no flows) a node's weight here is its demand estimate
// (ours). At the end of every interval each node sets its sub-token bucket
// of the key to its share of the rate r: floor/N of it split evenly
// (parameter floor, default 0.1, as adaptive's) plus (1 - floor) in
// proportion to its weight among the live members' (all of it evenly while
// no node has a weight), rounded down to the rate's units (1/1000 of r
// where the bucket package's resolution allows). The burst is split evenly
// in whole tokens, as static's (ours: FPS shares a rate; a small burst
// shared by weight would round most nodes' share down to 0). The level is
// kept (capped at the new burst: a re-split never creates tokens), so a
// node whose share grows refills into it. The shares of one key sum to
// r only when every node holds the same estimates; they are a
// snapshot of estimates up to one interval and one message old, so the
// sum can exceed (r, b) while demand moves (the estimation error that GDRL
// removes by moving capacity in exactly conserved transfers).
//
// # What is ours
//
// Flat sending of each node's estimates to every member once per interval
// (Raghavan et al. gossip them; the total is the same once delivered, and
// N-1 messages per node per interval is what the evaluator counts), the
// demand weight of fps, its floor, the units, and the bounds on peer input
// (wire.go). Membership: a member that leaves takes its estimates with it.
package drlest
