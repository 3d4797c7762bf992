package owner

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tokenmesh/tokenmesh/strategy/internal/buckets"
)

// Split (parameter split=K, the throttling article's per-server quotas; see the package
// doc): each key's (r, b) is split over K sub-buckets, each a sub-key with
// its own owner and table.

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
