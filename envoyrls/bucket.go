package envoyrls

import (
	"slices"
	"strings"
)

// MatchBucket finds the limit of an RLQS bucket id (a map of key to
// value, envoy.service.rate_limit_quota.v3.BucketId) in domain, by
// walking the descriptor tree level by level: at each level it takes, of
// the id's entries not used yet (in key order), the first whose
// "key_value" is a child, else the first that a wildcard child prefixes
// (in file order), else the first whose bare key is a child, as Match does
// for one RLS entry. Every entry must be used and the descriptor reached
// must have a limit; otherwise (an unknown domain, an empty id, no match)
// it returns nil: the bucket has no limit (RLQS answers it ALLOW_ALL, as
// an unmatched RLS descriptor is OK). key is the bucket's key in the
// limit's rule, as Match builds it from the entries in walk order: an RLS
// check of the same descriptor draws on the same bucket. Ours (RLQS has
// no descriptor order; this is the order the tree imposes).
func (c *Config) MatchBucket(domain string, id map[string]string) (l *Limit, key string) {
	d := c.Domains[domain]
	if d == nil || len(id) == 0 {
		return nil, ""
	}
	keys := make([]string, 0, len(id))
	for k := range id {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var entries []Entry
	cur := &d.root
	for len(keys) > 0 {
		i, next := step(cur, keys, id)
		if next == nil {
			return nil, ""
		}
		entries = append(entries, Entry{Key: keys[i], Value: id[keys[i]]})
		keys = slices.Delete(keys, i, i+1)
		cur = next
	}
	return c.Match(domain, entries)
}

// step picks the entry of id (among keys) that leads from cur to a child,
// with Match's precedence: exact value, wildcard, bare key.
func step(cur *node, keys []string, id map[string]string) (int, *node) {
	for i, k := range keys {
		if n := cur.children[k+"_"+id[k]]; n != nil {
			return i, n
		}
	}
	for _, w := range cur.wildcard {
		prefix := strings.TrimSuffix(w, "*")
		for i, k := range keys {
			if strings.HasPrefix(k+"_"+id[k], prefix) {
				return i, cur.children[w]
			}
		}
	}
	for i, k := range keys {
		if n := cur.children[k]; n != nil {
			return i, n
		}
	}
	return -1, nil
}
