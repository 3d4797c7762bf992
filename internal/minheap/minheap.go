// Package minheap is a binary min-heap over a slice of values, ordered by a
// less function. Unlike container/heap it does not box values in
// interfaces, so pushing a struct does not allocate once the slice has grown.
package minheap

import "slices"

// Heap is a min-heap of T. The zero Heap is not usable; use New.
type Heap[T any] struct {
	items []T
	less  func(a, b T) bool
}

// New returns an empty heap ordered by less.
func New[T any](less func(a, b T) bool) *Heap[T] { return &Heap[T]{less: less} }

// Len is the number of items.
func (h *Heap[T]) Len() int { return len(h.items) }

// Peek returns the smallest item; the heap must not be empty.
func (h *Heap[T]) Peek() T { return h.items[0] }

// Items returns the items in heap order (not sorted), for iteration.
func (h *Heap[T]) Items() []T { return h.items }

// Push adds x.
func (h *Heap[T]) Push(x T) {
	h.items = append(h.items, x)
	i := len(h.items) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(h.items[i], h.items[p]) {
			break
		}
		h.items[i], h.items[p] = h.items[p], h.items[i]
		i = p
	}
}

// Pop removes and returns the smallest item; the heap must not be empty.
func (h *Heap[T]) Pop() T {
	top := h.items[0]
	last := len(h.items) - 1
	h.items[0] = h.items[last]
	var zero T
	h.items[last] = zero
	h.items = h.items[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < last && h.less(h.items[l], h.items[m]) {
			m = l
		}
		if r < last && h.less(h.items[r], h.items[m]) {
			m = r
		}
		if m == i {
			return top
		}
		h.items[i], h.items[m] = h.items[m], h.items[i]
		i = m
	}
}

// Shrink moves the items into a new array sized for them when they fill
// under a quarter of the current one (of at least 1,024): a slice keeps
// its capacity as items are popped. The items keep their order, which is
// heap order, so nothing pops in another order.
func (h *Heap[T]) Shrink() {
	if cap(h.items) >= 1024 && len(h.items) < cap(h.items)/4 {
		h.items = slices.Clone(h.items)
	}
}
