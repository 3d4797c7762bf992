// Package rendezvous implements rendezvous (highest random weight) hashing:
// every node gets a pseudo-random weight for a key and the key's owners are
// the nodes with the highest weights. When a node leaves, only the keys it
// owned move, each to its next node in rank order; when one joins, it takes
// only the keys it now ranks first for.
//
// Source: "Throttling in Distributed Systems" (the throttling article): consistent hashing
// to a designated server per tenant, improved by rendezvous hashing that
// selects K servers per tenant. The weight function (FNV-1a of the key,
// mixed with the node's hash by the splitmix64 finaliser) is ours.
package rendezvous

import (
	"github.com/tokenmesh/tokenmesh/strategy"
)

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// HashString is FNV-1a 64 of s. It does not allocate.
func HashString(s string) uint64 {
	h := uint64(fnvOffset)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// mix is the splitmix64 finaliser: a bijection that spreads every input bit
// over the output.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Weight is node's weight for the key whose HashString is keyHash.
func Weight(keyHash uint64, node strategy.NodeID) uint64 {
	return mix(keyHash ^ mix(HashString(string(node))))
}

// Owner returns the member with the highest weight for key, or "" when
// members is empty. Ties (equal weights) go to the smaller NodeID, so the
// answer depends only on the set of members. It does not allocate.
func Owner(key string, members []strategy.NodeID) strategy.NodeID {
	kh := HashString(key)
	var best strategy.NodeID
	var bestW uint64
	for i, m := range members {
		w := Weight(kh, m)
		if i == 0 || w > bestW || (w == bestW && m < best) {
			best, bestW = m, w
		}
	}
	return best
}

// Rank appends to dst the first k members in rendezvous order for key
// (highest weight first) and returns it. k larger than len(members) returns
// all of them.
func Rank(dst []strategy.NodeID, key string, members []strategy.NodeID, k int) []strategy.NodeID {
	kh := HashString(key)
	type nw struct {
		n strategy.NodeID
		w uint64
	}
	var buf [16]nw
	ws := buf[:0]
	for _, m := range members {
		ws = append(ws, nw{m, Weight(kh, m)})
	}
	// Selection of the top k; k is small (the K of the throttling article).
	k = min(k, len(ws))
	for i := 0; i < k; i++ {
		best := i
		for j := i + 1; j < len(ws); j++ {
			if ws[j].w > ws[best].w || (ws[j].w == ws[best].w && ws[j].n < ws[best].n) {
				best = j
			}
		}
		ws[i], ws[best] = ws[best], ws[i]
		dst = append(dst, ws[i].n)
	}
	return dst
}
