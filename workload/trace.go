package workload

import (
	"fmt"
	"slices"
	"time"
)

// Request is one request for Tokens tokens of Key, arriving at the cluster at Arrival
// (time since the start of the trace).
//
// Arrival is >= 0 and a whole number of milliseconds for every Request produced by this
// package. Key is non-empty and Tokens >= 1.
type Request struct {
	Arrival time.Duration
	Key     string
	Tokens  int64
}

// Trace is an in-memory workload, sorted by Arrival; requests with equal Arrival keep
// file (or generation) order.
//
// Traces read by [ReadFile] and [Read] start at Arrival 0 and hold at least one request;
// generated traces hold the requests in [0, duration) of their generator, which may be
// none. In both, equal keys share one string (keys are interned), so a trace of N
// requests costs about 32*N bytes plus the distinct key strings.
type Trace struct {
	// Name is the file base name (for [ReadFile]), the name given to [Read], or the
	// canonical generator spec (Generator.String) for generated traces.
	Name string
	// Requests in arrival order; equal arrivals keep their file or generation order.
	Requests []Request
	// Skipped counts bad lines skipped because ReadOptions.SkipBad was set.
	Skipped int
	// SkippedExamples holds the first (at most 5) skipped lines' errors as
	// "file:line: reason" strings, for reports.
	SkippedExamples []string
	// Follow, when positive, says the load follows the sun (the tenants
	// generator's follow=D): each key's requests are offered in one region
	// at a time and move to the next region every Follow. A simulator with
	// regions places them (sim, regions.go); 0: the requests come from
	// anywhere.
	Follow time.Duration
}

// maxSkippedExamples bounds Trace.SkippedExamples.
const maxSkippedExamples = 5

// Keys returns the number of distinct keys in the trace. It costs O(len(Requests)) time
// and a map of the distinct keys.
func (t *Trace) Keys() int {
	seen := make(map[string]struct{})
	for i := range t.Requests {
		seen[t.Requests[i].Key] = struct{}{}
	}
	return len(seen)
}

// Span returns the time between the first and the last request (last Arrival - first
// Arrival), 0 for a trace with fewer than two requests.
func (t *Trace) Span() time.Duration {
	if len(t.Requests) == 0 {
		return 0
	}
	return t.Requests[len(t.Requests)-1].Arrival - t.Requests[0].Arrival
}

// KeyCounts returns the number of requests per key (requests, not tokens). The map is
// new on every call; the caller may modify it.
func (t *Trace) KeyCounts() map[string]int {
	counts := make(map[string]int)
	for i := range t.Requests {
		counts[t.Requests[i].Key]++
	}
	return counts
}

// sortStable sorts requests by Arrival, keeping the order of equal arrivals. It does
// nothing (and costs one pass) when they are already sorted.
func sortStable(reqs []Request) {
	if slices.IsSortedFunc(reqs, cmpArrival) {
		return
	}
	slices.SortStableFunc(reqs, cmpArrival)
}

func cmpArrival(a, b Request) int {
	switch {
	case a.Arrival < b.Arrival:
		return -1
	case a.Arrival > b.Arrival:
		return 1
	}
	return 0
}

// interner makes equal keys share one string. Looking up a []byte converted in the
// map index expression does not allocate, so only the first occurrence of each key
// costs an allocation.
type interner map[string]string

func (in interner) bytes(b []byte) string {
	if s, ok := in[string(b)]; ok {
		return s
	}
	s := string(b)
	in[s] = s
	return s
}

// errNoRequests is the error for a trace without requests.
func errNoRequests(name string, skipped int) error {
	if skipped > 0 {
		return fmt.Errorf("workload: no requests in %s (%d bad lines skipped)", name, skipped)
	}
	return fmt.Errorf("workload: no requests in %s", name)
}
