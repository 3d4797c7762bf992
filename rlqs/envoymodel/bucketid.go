package envoymodel

import (
	"maps"
	"slices"
	"strings"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
)

// BucketID is the id of one quota bucket: the map of an RLQS BucketId
// (rlqs.proto, message BucketId), kept with its canonical key. The order of
// the map's entries does not matter ({a: A, b: B} and {b: B, a: A} are one
// bucket, as rlqs.proto says and Envoy's MessageUtil::hash of the BucketId
// agrees). A BucketID is immutable; the zero BucketID is the empty map, which
// Envoy produces for a bucket whose settings have no bucket_id_builder
// (matcher.cc RateLimitOnMatchAction::generateBucketId) and which no RLQS
// response can address (BucketId requires at least one entry).
type BucketID struct {
	key   string
	pairs map[string]string
}

// NewBucketID returns the BucketID of the map m (copied: later changes to m
// do not change the id).
func NewBucketID(m map[string]string) BucketID {
	if len(m) == 0 {
		return BucketID{}
	}
	pairs := maps.Clone(m)
	return BucketID{key: canonicalKey(pairs), pairs: pairs}
}

// BucketIDFromProto returns the BucketID of an RLQS BucketId (nil is the
// empty id).
func BucketIDFromProto(id *rlqsv3.BucketId) BucketID {
	return NewBucketID(id.GetBucket())
}

// Key is the canonical key of the id: its entries sorted by key, written
// key=value and joined by commas, with '\', '=' and ',' inside keys and values
// escaped by a backslash ("env=prod,name=web"); the empty id's key is "".
// Two ids have the same key exactly when they have the same entries.
func (b BucketID) Key() string { return b.key }

// String is Key.
func (b BucketID) String() string { return b.key }

// Map returns a copy of the id's entries.
func (b BucketID) Map() map[string]string { return maps.Clone(b.pairs) }

// Proto returns the id as an RLQS BucketId (a new message).
func (b BucketID) Proto() *rlqsv3.BucketId {
	return &rlqsv3.BucketId{Bucket: maps.Clone(b.pairs)}
}

// canonicalKey writes m's entries sorted by key as k=v,k=v with \, = and ,
// escaped, so that distinct maps never share a key.
func canonicalKey(m map[string]string) string {
	keys := slices.Sorted(maps.Keys(m))
	var sb strings.Builder
	for i, k := range keys {
		if i > 0 {
			sb.WriteByte(',')
		}
		escapeTo(&sb, k)
		sb.WriteByte('=')
		escapeTo(&sb, m[k])
	}
	return sb.String()
}

func escapeTo(sb *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\', '=', ',':
			sb.WriteByte('\\')
			sb.WriteByte(c)
		default:
			sb.WriteByte(c)
		}
	}
}
