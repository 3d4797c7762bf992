package owner

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/buckets"
)

// Split (parameter split=K, the throttling article's per-server quotas; see the package
// doc): each key's (r, b) is split over K sub-buckets, each a sub-key with
// its own owner and table.
//
// Placement (parameter split_placement): the throttling article selects "K
// (rather than just one) servers to handle a tenant's traffic" by
// rendezvous hashing, i.e. the tenant's first K servers in rendezvous
// order, and spreads the tenant's requests over them.
//   - independent (the default, the placement of every build before it):
//     sub-key i is placed like any key, rendezvous.Owner(key+"\x00"+i), so
//     the K picks are independent and two sub-buckets of a key share a node
//     with probability 1 - (N-1)!/((N-K)! N^(K-1)) (K=4 of N=10: 50%);
//     the node holding two of them decides 2/K of the key's requests.
//   - distinct: sub-bucket i is owned by node i mod N of the key's
//     rendezvous order (rendezvous.Rank of the key itself) and replicated
//     on the nodes after it in that order, so the K sub-buckets sit on K
//     distinct nodes when K <= N (and K > N spreads them evenly, each node
//     floor(K/N) or ceil(K/N)). When a node leaves, each sub-bucket ranked at
//     or after it moves one place down the order, to the next node, which
//     holds its replica (replicas >= 2); a join moves those at or after the
//     joiner's rank one place up, to a node that gets the level by the
//     usual hand-over and warm-up. So a membership change moves about
//     K(K+1)/(2N) sub-buckets of a key where independent picks move K/N: the
//     price of the distinct nodes, paid only at membership changes. Each
//     move is an ownership change like a key's own (views that differ
//     during detection route it to both nodes; hand-over, warm-up and the
//     merge rule apply), so the property bounds hold as they are
//     (TestSplitDistinctWithinEnvelope, with crashes and loss).
//
// Wire: the sub-key names are the same under both placements, so a peer of
// either placement accepts the other's forwards and levels. But while nodes
// disagree on the placement (a config rollout that changes it), a sub-key
// has two owners, each deciding from its own level of (r/K, b_i): under
// partition: available a key can admit up to twice its envelope b + r*T over
// that window (as during a partition; the replica merges keep the more
// consumed level wherever the two meet, which does not bound it), and under
// conserve the node that does not own a forwarded sub-key in its view
// refuses it (false rejections instead). That is why the new placement is a
// parameter value and not the new behaviour of split: a build upgrade with
// unchanged parameters places exactly as before, and an operator changes
// split_placement like split itself, knowing the window.

// maxSplit bounds the split parameter.
const maxSplit = 64

// subKey names sub-bucket i of key (split > 1): the key, a NUL byte and i
// in decimal. subIndex parses it back from the last NUL, so any key
// (even one holding NUL bytes) maps to distinct sub-keys.
func subKey(key string, i int) string { return key + "\x00" + strconv.Itoa(i) }

// subIndex is the sub-bucket index of a key this node decides or holds:
// 0 without split; with split, the index after the key's last NUL byte.
// Errors: with split, a key without a valid index (a peer with another
// split setting, or a corrupt frame).
func (o *Owner) subIndex(key string) (int, error) {
	if o.split == 1 {
		return 0, nil
	}
	j := strings.LastIndexByte(key, 0)
	if j < 0 {
		return 0, fmt.Errorf("key %q has no sub-bucket index (split=%d)", key, o.split)
	}
	i, err := strconv.Atoi(key[j+1:])
	if err != nil || i < 0 || i >= o.split || key[j+1:] != strconv.Itoa(i) {
		return 0, fmt.Errorf("key %q: sub-bucket index %q is not in [0, %d)", key, key[j+1:], o.split)
	}
	return i, nil
}

// subOf is the index of key's (sub-)bucket table; key is one subIndex
// accepts (0 otherwise).
func (o *Owner) subOf(key string) int {
	if o.auto != nil {
		return o.autoTab(key)
	}
	i, _ := o.subIndex(key)
	return i
}

// tab is the table of key's (sub-)bucket; key is one subIndex accepts.
func (o *Owner) tab(key string) *buckets.Table { return o.tables[o.subOf(key)] }

// sortedKeys is every key of every table, sorted.
func (o *Owner) sortedKeys() []string {
	if len(o.tables) == 1 {
		return o.table.SortedKeys()
	}
	var out []string
	for _, t := range o.tables {
		out = append(out, t.SortedKeys()...)
	}
	slices.Sort(out)
	return out
}

// quotaSplit is the split of a key whose rate is r under the parameter
// server_quota (tokens/s a node should decide per key): K = ceil(r /
// quota), at least 1. The throttling article's preset variant: "preset an
// RPS limit per server per tenant ... the tenant is allowed to send 400 RPS
// and RPS limit per server per tenant is 100, then the selector knows it
// should have K = 400 / 100 = 4". Its limitation (a tenant's limit only in
// increments of the quota) is not ours: each sub-bucket gets r/K <= quota,
// the article's second method (the per-server limit propagated as R/K).
// K is the rule's, from its configured rate, so every node computes the same.
// Errors: a quota not positive and finite, or K above maxSplit.
func quotaSplit(r bucket.Rate, quota float64) (int, error) {
	if !(quota > 0) || math.IsInf(quota, 0) {
		return 0, fmt.Errorf("owner: parameter server_quota=%g must be positive and finite", quota)
	}
	// The tolerance keeps 400/100 at 4 whatever the rounding of PerSec.
	k := math.Ceil(r.PerSec()/quota - 1e-9)
	if k > maxSplit {
		return 0, fmt.Errorf("owner: parameter server_quota=%g: rate %g/s needs %g sub-buckets, above split's maximum %d", quota, r.PerSec(), k, maxSplit)
	}
	return max(int(k), 1), nil
}

// Values of split_placement (see Placement above).
const (
	placementIndependent = "independent"
	placementDistinct    = "distinct"
)

// placement is the first n nodes among members that hold key's level, in
// the order they take over as its primary: rendezvous order of key itself,
// or, for a sub-key under split_placement=distinct, the nodes of its parent
// key's rendezvous order from the sub-bucket's index on, wrapping around.
// The result is o.rank, valid until the next call.
func (o *Owner) placement(key string, members []strategy.NodeID, n int) []strategy.NodeID {
	parent, i, ok := o.distinctSub(key)
	if !ok {
		o.rank = rendezvous.Rank(o.rank[:0], key, members, n)
		return o.rank
	}
	o.rank = o.rank[:0]
	m := len(members)
	order := o.parentOrder(parent, i, members, n)
	for j := range min(n, m) {
		o.rank = append(o.rank, order[(i%m+j)%m])
	}
	return o.rank
}

// parentOrder is (in o.rankAll) as much of parent's rendezvous order among
// members as sub-bucket i's first n holders need: the first i mod N + n
// nodes, or all N when they wrap around.
func (o *Owner) parentOrder(parent string, i int, members []strategy.NodeID, n int) []strategy.NodeID {
	m := len(members)
	if m == 0 {
		return nil
	}
	o.rankAll = rendezvous.Rank(o.rankAll[:0], parent, members, min(i%m+n, m))
	return o.rankAll
}

// ownerIn is key's primary among members ("" when there are none). It does
// not touch o.rank, so a caller may hold placement's result across it.
func (o *Owner) ownerIn(key string, members []strategy.NodeID) strategy.NodeID {
	parent, i, ok := o.distinctSub(key)
	if !ok {
		return rendezvous.Owner(key, members)
	}
	order := o.parentOrder(parent, i, members, 1)
	if len(order) == 0 {
		return ""
	}
	return order[i%len(members)]
}

// distinctSub is, under split_placement=distinct, key's parent key and
// sub-bucket index; ok is false otherwise (no split, independent
// placement, or a key without a valid index: placed as itself).
func (o *Owner) distinctSub(key string) (parent string, i int, ok bool) {
	if !o.distinct || o.split == 1 {
		return "", 0, false
	}
	i, err := o.subIndex(key)
	if err != nil {
		return "", 0, false
	}
	return key[:strings.LastIndexByte(key, 0)], i, true
}
