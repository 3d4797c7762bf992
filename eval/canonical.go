package eval

import "github.com/tokenmesh/tokenmesh/workload"

// Canonicalize reorders the decisions among identical requests (same key,
// arrival and tokens: the trace cannot tell them apart) so that the
// admitted ones come first in trace order, as central, which decides in
// trace order, admits them. Identical requests reach a live cluster
// (`tokenmesh replay`: sent at the same wall time by different senders)
// or a simulated one behind a client path (Options.ClientLatency) in any
// order; without this, a different order of the same decisions would
// count as one false rejection plus one excess admission that cancel out.
// reqs is sorted by Arrival; allowed[i] is request i's decision. It
// returns the number of decisions it moved.
func Canonicalize(reqs []workload.Request, allowed []bool) int {
	type id struct {
		key    string
		tokens int64
	}
	moved := 0
	groups := map[id][]int{}
	for start := 0; start < len(reqs); {
		end := start
		for end < len(reqs) && reqs[end].Arrival == reqs[start].Arrival {
			end++
		}
		if end-start > 1 {
			clear(groups)
			for i := start; i < end; i++ {
				k := id{reqs[i].Key, reqs[i].Tokens}
				groups[k] = append(groups[k], i)
			}
			for _, idx := range groups {
				n := 0
				for _, i := range idx {
					if allowed[i] {
						n++
					}
				}
				for j, i := range idx {
					if want := j < n; allowed[i] != want {
						allowed[i] = want
						moved++
					}
				}
			}
		}
		start = end
	}
	return moved
}
