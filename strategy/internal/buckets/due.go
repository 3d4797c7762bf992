package buckets

import (
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
)

// SetRateKeepingDue is SetRate for a table whose negative levels are
// waiting mode's reservations (SRTM §5.2): every bucket is re-rated with
// bucket.Bucket.SetRateKeepingDue, so a raise does not repay a debt
// before the reservations behind it are due. Errors as SetRate's.
func (t *Table) SetRateKeepingDue(now time.Duration, rate bucket.Rate, burst int64) error {
	if _, err := bucket.New(rate, burst, now); err != nil {
		return err
	}
	t.rate, t.burst = rate, burst
	t.ch.invalidate() // every bucket changes
	for _, e := range t.m {
		_ = e.b.SetRateKeepingDue(now, rate, burst) // cannot fail: validated above
	}
	return nil
}
