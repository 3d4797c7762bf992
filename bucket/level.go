package bucket

import (
	"fmt"
	"time"
)

// Level is the bucket's exact state at now, for a snapshot that must
// survive a restart: the tokens it holds in ticks, its capacity (burst) in
// ticks, and the ticks that make one token (Rate.Per in nanoseconds, or
// 1e9 for a zero rate). Tokens = level/ticksPerToken. It works on a copy
// (value receiver): b is not advanced, so a caller may take a snapshot
// between decisions at earlier times (owner's ordering buffer) without
// changing them. A time before the bucket's last update reads the level
// at that update.
func (b Bucket) Level(now time.Duration) (level, capacity, ticksPerToken int64) {
	b.advance(now)
	return b.level, b.capacity, b.per
}

// SetLevel sets the tokens b holds at now to level ticks of size
// 1/ticksPerToken token (a Level read from a bucket whose rate may
// differ: the level is rescaled to b's ticks, rounding down), capped at
// b's burst. b's last update becomes now; a now before it is treated as
// it (time never goes backwards). Errors, leaving b unchanged: a
// negative level or a non-positive ticksPerToken.
func (b *Bucket) SetLevel(now time.Duration, level, ticksPerToken int64) error {
	switch {
	case ticksPerToken <= 0:
		return fmt.Errorf("bucket: %d ticks per token is not positive", ticksPerToken)
	case level < 0:
		return fmt.Errorf("bucket: level %d ticks is negative", level)
	}
	b.advance(now)
	b.level = min(rescale(level, ticksPerToken, b.per), b.capacity)
	return nil
}
