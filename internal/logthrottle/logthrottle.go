// Package logthrottle keeps log lines about a repeated event readable: at
// most one line per key per interval, and the events held back in between
// counted, so the next line can say how many it stands for (ours; used for
// refused peer frames by cluster and cluster/grpcpeer).
package logthrottle

import (
	"sync"
	"time"
)

// Throttle decides, per key, whether an event is logged now. The zero
// value needs Every set; Now defaults to time.Now. Safe for concurrent use.
type Throttle struct {
	// Every is the least time between two logged events of one key.
	Every time.Duration
	// Now is the clock (tests move it); nil: time.Now.
	Now func() time.Time

	mu sync.Mutex
	by map[string]*entry
}

type entry struct {
	last       time.Time
	suppressed int64
}

// Allow reports whether an event of key is to be logged now and, when it
// is, how many events of key were held back since the last logged one.
func (t *Throttle) Allow(key string) (suppressed int64, ok bool) {
	now := time.Now
	if t.Now != nil {
		now = t.Now
	}
	at := now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.by == nil {
		t.by = map[string]*entry{}
	}
	e := t.by[key]
	if e == nil {
		e = &entry{}
		t.by[key] = e
	}
	if !e.last.IsZero() && at.Sub(e.last) < t.Every {
		e.suppressed++
		return 0, false
	}
	suppressed = e.suppressed
	e.last, e.suppressed = at, 0
	return suppressed, true
}
