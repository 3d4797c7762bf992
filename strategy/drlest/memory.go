package drlest

import (
	"unsafe"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/memsize"
)

// Heap sizes of grd's and fps's state (64-bit Go), from the structures themselves.
var (
	keyStateAlloc = int(unsafe.Sizeof(keyState{}))                          // a key's *keyState
	bucketAlloc   = int(unsafe.Sizeof(bucket.Bucket{}))                     // fps: a key's *bucket.Bucket
	peerSlot      = memsize.StringHeader + int(unsafe.Sizeof(peerDemand{})) // a slot of a key's peers map
)

// keysSlot is a slot of the keys map: the key's string header and the *keyState.
const keysSlot = memsize.StringHeader + memsize.Pointer

// memory is grd's and fps's heap accounting, kept where keys, buckets and
// peers' estimates are created and dropped (O(1) each), so that
// MemoryBytes walks no key.
type memory struct {
	keys     memsize.Keys // the keys map: its keys, entries and peak
	buckets  int          // keys with a bucket (fps)
	peerMaps int          // keys with a peers map
	peerPeak int          // the most entries a peers map has held (at most the members)
}

// shrinkKeys copies the keys map into a new one when it holds under a
// quarter of its peak (a Go map keeps the slots of its largest size).
// Nothing depends on its order (keys are sorted where it matters).
func (d *DRL) shrinkKeys() {
	d.keys = memsize.Shrink(d.keys, &d.mem.keys)
}

// dropped counts key, just deleted, whose state was k.
func (d *DRL) dropped(key string, k *keyState) {
	d.mem.keys.Remove(key)
	if k.bucket != nil {
		d.mem.buckets--
	}
	if k.peers != nil {
		d.mem.peerMaps--
	}
}

// MemoryBytes estimates the Go heap this node's grd or fps state takes, in
// bytes (strategy.MemoryReporter; ours): the keys map (slots by its peak
// since it was last rebuilt, a keyState per key, the keys' strings), the
// fps buckets, and per key with peers' estimates a map sized for the most
// peers one has held. O(1): no key is walked.
func (d *DRL) MemoryBytes() int {
	n := d.mem.keys.Bytes(keysSlot, keyStateAlloc) + d.mem.buckets*memsize.Alloc(bucketAlloc)
	return n + d.mem.peerMaps*(memsize.MapHeader+memsize.Map(d.mem.peerPeak, peerSlot))
}

var _ strategy.MemoryReporter = (*DRL)(nil)
