package keyorder

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// TestIndexProperty: under random adds, removes (of any key, visited or
// not) and pass steps, an Index holds exactly the keys of a model set,
// each once, at the place its map says; a pass visits every key held at
// its beginning and not removed exactly once (keys added during it at
// most once); and Peak covers the positions' map.
func TestIndexProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var x Index
		model := map[string]bool{}
		visited := map[string]int{}
		atStart := map[string]bool{}
		for i := range rapid.IntRange(1, 300).Draw(t, "ops") {
			switch rapid.IntRange(0, 3).Draw(t, "op") {
			case 0: // add
				k := fmt.Sprint("k", rapid.IntRange(0, 60).Draw(t, "key"))
				if !model[k] {
					x.Add(k)
					model[k] = true
				}
			case 1: // remove
				k := fmt.Sprint("k", rapid.IntRange(0, 60).Draw(t, "key"))
				x.Remove(k)
				delete(model, k)
				delete(atStart, k)
				delete(visited, k) // if added again, a new key: visited in the pass
			default: // a step: visit the key at the cursor
				k, ok := x.Next()
				if !ok {
					for k := range atStart {
						if visited[k] != 1 {
							t.Fatalf("op %d: key %q, held through the pass, visited %d times", i, k, visited[k])
						}
					}
					x.EndPass()
					clear(visited)
					clear(atStart)
					for k := range model {
						atStart[k] = true
					}
					continue
				}
				if visited[k]++; visited[k] > 1 {
					t.Fatalf("op %d: key %q visited twice in a pass", i, k)
				}
				x.Visited()
			}
			if x.Len() != len(model) || len(x.pos) != len(model) {
				t.Fatalf("op %d: %d keys in the order, %d positions, %d in the model", i, x.Len(), len(x.pos), len(model))
			}
			for k := range model {
				if p, ok := x.pos[k]; !ok || x.Key(int(p)) != k {
					t.Fatalf("op %d: key %q's place is wrong", i, k)
				}
			}
			if x.Peak() < len(x.pos) {
				t.Fatalf("op %d: Peak %d below the %d positions held", i, x.Peak(), len(x.pos))
			}
		}
	})
}
