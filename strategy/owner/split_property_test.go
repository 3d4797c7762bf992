package owner_test

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
)

// TestSplitDistinctWithinEnvelope is TestSplitWithinEnvelope under
// split_placement=distinct: with random crashes, restarts and loss, the
// sub-buckets together stay within the key's envelope plus the crash bound,
// and no peer message is refused.
func TestSplitDistinctWithinEnvelope(t *testing.T) {
	rate, burst := bucket.Rate{Tokens: 2, Per: time.Second}, int64(5)
	rapid.Check(t, func(t *rapid.T) {
		k := rapid.IntRange(2, 4).Draw(t, "split")
		c := drawCase(t, false)
		v := runCase(t, c, rate, burst, rapid.Uint64().Draw(t, "seed"), fmt.Sprintf("split=%d", k), "split_placement=distinct")
		if bound := c.bound(burst); v > bound {
			t.Fatalf("split=%d distinct: envelope violated by %.3f tokens with %d crashes (bound %v)", k, v, c.crashes, bound)
		}
	})
}
