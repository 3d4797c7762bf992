package envoyrls

import "strings"

// Entry is one (key, value) pair of a request descriptor.
type Entry struct{ Key, Value string }

// Match finds the limit of one request descriptor in domain, with
// envoyproxy/ratelimit's lookup (config_impl.go GetLimit): for each entry
// in order, the child "key_value", else the first wildcard child (in file
// order) whose text before '*' prefixes "key_value", else the child "key"
// (a descriptor without value: any value). The limit is the one of the
// descriptor the last entry lands on; a request with fewer or more entries
// than the path to a rate_limit, an unknown domain or no match gives nil
// (no limit).
//
// key is the request's key in the limit's rule: the entries' values, with
// the wildcard value ("files/*") for an entry matched through a wildcard
// with share_threshold (all such values share one bucket), each value
// escaped ('\' and '|' prefixed with '\') and joined by '|'. The rule fixes
// the entries' keys, so the values alone tell requests apart.
func (c *Config) Match(domain string, entries []Entry) (l *Limit, key string) {
	d := c.Domains[domain]
	if d == nil || len(entries) == 0 {
		return nil, ""
	}
	values := make([]string, len(entries))
	cur := &d.root
	for i, e := range entries {
		final := e.Key + "_" + e.Value
		next := cur.children[final]
		viaWildcard := false
		if next == nil {
			for _, w := range cur.wildcard {
				if strings.HasPrefix(final, strings.TrimSuffix(w, "*")) {
					next, viaWildcard = cur.children[w], true
					break
				}
			}
		}
		if next == nil {
			next = cur.children[e.Key]
		}
		values[i] = e.Value
		if viaWildcard && next.pattern != "" {
			values[i] = next.pattern
		}
		if next == nil {
			return nil, ""
		}
		if i == len(entries)-1 {
			if next.limit == nil {
				return nil, ""
			}
			return next.limit, joinKey(values)
		}
		if len(next.children) == 0 {
			return nil, "" // more entries than the tree is deep
		}
		cur = next
	}
	return nil, ""
}

// joinKey escapes and joins descriptor values into one bucket key.
func joinKey(values []string) string {
	var b strings.Builder
	for i, v := range values {
		if i > 0 {
			b.WriteByte('|')
		}
		for j := 0; j < len(v); j++ {
			if v[j] == '\\' || v[j] == '|' {
				b.WriteByte('\\')
			}
			b.WriteByte(v[j])
		}
	}
	return b.String()
}
