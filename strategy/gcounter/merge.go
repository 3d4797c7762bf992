package gcounter

import (
	"cmp"
	"slices"
)

// Merging: the join of two replicas of a key's bucket (the thesis' listing 3.4)
// and the comparisons it needs.

// add raises slot e.node/e.incarnation by e.consumed.
func (b *bucketState) add(e entry) {
	b.size = 0
	i, found := slices.BinarySearchFunc(b.counter, e, cmpSlot)
	if found {
		b.counter[i].consumed += e.consumed
	} else {
		b.counter = slices.Insert(b.counter, i, e)
	}
	b.consumed += e.consumed
}

// merge joins src into b (listing 3.4, with the tie rule of the package
// comment) and reports whether b changed. A higher generation replaces the
// whole state and a lower one is ignored; equal generations merge.
// b.touched is left to the caller.
func (b *bucketState) merge(src *bucketState) bool {
	switch {
	case src.gen < b.gen:
		return false
	case src.gen > b.gen:
		touched, pending, pos := b.touched, b.pending, b.pos // local only
		*b = *src.clone()
		b.touched, b.pending, b.size, b.pos = touched, pending, 0, pos
		return true
	}
	changed := false
	out := b.counter
	if !slotsCover(b.counter, src.counter) {
		out = unionSlots(b.counter, src.counter)
		changed = true
	} else {
		// Same slots or a subset: raise in place.
		changed = raiseSlots(out, src.counter)
	}
	if changed {
		b.counter = out
		b.consumed = 0
		for _, e := range out {
			b.consumed += e.consumed
		}
	}
	if cmpLimit(src, b) > 0 {
		b.limit, b.frac, b.refill = src.limit, src.frac, src.refill
		changed = true
	}
	if changed {
		b.size = 0
	}
	return changed
}

// unionSlots returns the slots of a and b (both sorted) in a new sorted
// slice, a slot in both with the larger count.
func unionSlots(a, b []entry) []entry {
	out := make([]entry, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && cmpSlot(a[i], b[j]) < 0):
			out = append(out, a[i])
			i++
		case i == len(a) || cmpSlot(a[i], b[j]) > 0:
			out = append(out, b[j])
			j++
		default:
			e := a[i]
			e.consumed = max(e.consumed, b[j].consumed)
			out = append(out, e)
			i++
			j++
		}
	}
	return out
}

// raiseSlots raises each slot of have to its count in sub (both sorted,
// every slot of sub in have) where that is larger, and reports whether one
// was.
func raiseSlots(have, sub []entry) bool {
	changed := false
	j := 0
	for i := range have {
		if j < len(sub) && cmpSlot(have[i], sub[j]) == 0 {
			if sub[j].consumed > have[i].consumed {
				have[i].consumed = sub[j].consumed
				changed = true
			}
			j++
		}
	}
	return changed
}

// slotsCover reports whether every slot of sub is in have (both sorted).
func slotsCover(have, sub []entry) bool {
	i := 0
	for _, e := range sub {
		for i < len(have) && cmpSlot(have[i], e) < 0 {
			i++
		}
		if i == len(have) || cmpSlot(have[i], e) != 0 {
			return false
		}
		i++
	}
	return true
}

// cmpLimit orders buckets by (limit, fraction, refill timestamp).
func cmpLimit(a, b *bucketState) int {
	return cmp.Or(cmp.Compare(a.limit, b.limit), cmp.Compare(a.frac, b.frac), cmp.Compare(a.refill, b.refill))
}

func (b *bucketState) clone() *bucketState {
	c := *b
	c.counter = slices.Clone(b.counter)
	return &c
}

// equal compares the replicated state (not touched).
func (b *bucketState) equal(o *bucketState) bool {
	return b.gen == o.gen && b.consumed == o.consumed && cmpLimit(b, o) == 0 && slices.Equal(b.counter, o.counter)
}
