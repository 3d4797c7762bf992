package archtest

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tokenmesh/tokenmesh/strategy/registry"
)

// snapshotListRE finds docs/OPERATIONS.md's list of the strategies that
// snapshot and of those that start fresh (whitespace normalised).
var snapshotListRE = regexp.MustCompile(`the strategies that snapshot: ([^;]+); the others start fresh: ([^;)]+)`)

// docs/OPERATIONS.md ("Restart") names the strategies that snapshot and
// those that start fresh as the registry has them (registry.Info.Snapshots,
// which `tokenmesh strategies` shows), every strategy in one of the two.
func TestOperationsListsTheSnapshotters(t *testing.T) {
	text := strings.Join(strings.Fields(readDoc(t, "docs/OPERATIONS.md")), " ")
	m := snapshotListRE.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("docs/OPERATIONS.md: no %q: the Restart item must name the strategies that snapshot, then those that start fresh", snapshotListRE)
	}
	var snapshot, fresh []string
	for _, info := range registry.List() {
		if info.Snapshots() {
			snapshot = append(snapshot, info.Name)
		} else {
			fresh = append(fresh, info.Name)
		}
	}
	for _, c := range []struct {
		what, doc string
		want      []string
	}{{"the strategies that snapshot", m[1], snapshot}, {"the others (start fresh)", m[2], fresh}} {
		var got []string
		for _, name := range strings.Split(c.doc, ",") {
			got = append(got, strings.TrimSpace(name))
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(c.want))
		if !slices.Equal(got, want) {
			t.Errorf("docs/OPERATIONS.md lists %s as %v; the registry (strategy/registry, Info.Snapshots: implements strategy.Snapshotter) has %v",
				c.what, got, c.want)
		}
	}
}
