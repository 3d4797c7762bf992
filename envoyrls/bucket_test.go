package envoyrls

import (
	"testing"

	"pgregory.net/rapid"
)

// An RLQS bucket id matches as the RLS descriptor whose entries follow the
// tree: nested levels whatever the map's order, wildcards, bare keys; an
// entry left over, a missing level or an unknown domain is no limit.
func TestMatchBucket(t *testing.T) {
	c := mustParse(t, exampleYAML)
	for _, x := range []struct {
		id        map[string]string
		path, key string
	}{
		{map[string]string{"remote_address": "1.2.3.4"}, "edge.remote_address", "1.2.3.4"},
		{map[string]string{"to_number": "555", "message_type": "marketing"}, "edge.message_type_marketing.to_number", "marketing|555"},
		{map[string]string{"message_type": "marketing"}, "", ""},
		{map[string]string{"to_number": "555"}, "edge.to_number", "555"},
		{map[string]string{"path": "/shared/a"}, "edge.path_/shared/*", "/shared/*"},
		{map[string]string{"path": "/files/a"}, "edge.path_/files/*", "/files/a"},
		{map[string]string{"remote_address": "1.2.3.4", "x": "y"}, "", ""},
		{map[string]string{}, "", ""},
	} {
		l, key := c.MatchBucket("edge", x.id)
		path := ""
		if l != nil {
			path = l.Path
		}
		if path != x.path || key != x.key {
			t.Errorf("MatchBucket(%v) = %q, %q; want %q, %q", x.id, path, key, x.path, x.key)
		}
	}
	if l, _ := c.MatchBucket("other", map[string]string{"remote_address": "1.2.3.4"}); l != nil {
		t.Error("an unknown domain matched")
	}
}

// Whatever the id, MatchBucket does not depend on the map's iteration
// order (Go randomises it): 20 calls give one answer.
func TestMatchBucketIsDeterministic(t *testing.T) {
	c := mustParse(t, exampleYAML)
	rapid.Check(t, func(t *rapid.T) {
		keys := []string{"remote_address", "message_type", "to_number", "path", "user", "tenant", "x"}
		vals := []string{"marketing", "555", "/files/a", "/shared/b", "gold", "1.2.3.4", ""}
		id := rapid.MapOf(rapid.SampledFrom(keys), rapid.SampledFrom(vals)).Draw(t, "id")
		l, key := c.MatchBucket("edge", id)
		for range 20 {
			if l2, key2 := c.MatchBucket("edge", id); l2 != l || key2 != key {
				t.Fatalf("MatchBucket(%v): %v %q, then %v %q", id, l, key, l2, key2)
			}
		}
	})
}
