package sim_test

import (
	"fmt"
	"os"
	"sort"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/workload"
)

func TestZZLease(t *testing.T) {
	if os.Getenv("ZZ") == "" {
		t.Skip()
	}
	rapid.Check(t, func(rt *rapid.T) {
		s := splitRun{strategy: "lease", nodes: 4, side: []int{0}, ratePerS: 56, burst: 4, keys: 3, split: 8 * time.Second, heal: 25 * time.Second, detection: 502 * time.Millisecond, jitter: 0, seed: 0xdf75}
		tr, res := s.run(rt, "conserve")
		assign2, _ := workload.NewAssigner("random", s.seed)
		for _, key := range []string{"k1"} {
			var ts []time.Duration
			type rec struct {
				at   time.Duration
				node int
				loc  bool
				lat  time.Duration
				dn   int32
			}
			var rs []rec
			for i, r := range tr.Requests {
				node := assign2.Assign(&tr.Requests[i], i, s.nodes)
				if r.Key != key || !res.Outcomes[i].Allowed {
					continue
				}
				ts = append(ts, r.Arrival)
				rs = append(rs, rec{r.Arrival, node, res.Outcomes[i].Local, res.Outcomes[i].Latency, res.Outcomes[i].Node})
			}
			sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
			best, minPre, mi, bi, bj := 0.0, 1e18, 0, 0, 0
			for i, t := range ts {
				if v := float64(i) - 56*t.Seconds(); v < minPre {
					minPre, mi = v, i
				}
				if v := float64(i+1) - 56*t.Seconds() - minPre - 4; v > best {
					best, bi, bj = v, mi, i
				}
			}
			fmt.Printf("key %s: %.3f over in %v .. %v (%d admitted)\n", key, best, ts[bi], ts[bj], bj-bi+1)
			for _, r := range rs {
				if r.at >= ts[bi]-300*time.Millisecond && r.at <= ts[bj]+50*time.Millisecond {
					fmt.Printf("   %v recv n%d decided n%d local=%v lat=%v\n", r.at, r.node, r.dn, r.loc, r.lat)
				}
			}
		}
	})
}
