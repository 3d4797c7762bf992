package registry

import (
	"slices"
	"testing"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// wireSizeOnly are the strategies whose tokenmesh_state_bytes is still the
// wire size, computed by a walk of their keys in the node's loop at every
// scrape (docs/API.md, "Metrics"; docs/PERFORMANCE.md, issue 28 item 5):
// none since regionlease and concurrency keep their estimates too.
var wireSizeOnly = []string{}

// TestMemoryReporters: every strategy reports its heap with an estimate
// kept as its keys change (strategy.MemoryReporter), so that a scrape walks
// no key, except those listed in wireSizeOnly (and the docs), and the
// list holds none that has one.
func TestMemoryReporters(t *testing.T) {
	for _, info := range List() {
		s, err := info.New(probeConfig())
		if err != nil {
			t.Fatalf("%s: %v", info.Name, err)
		}
		_, ok := s.(strategy.MemoryReporter)
		switch listed := slices.Contains(wireSizeOnly, info.Name); {
		case !ok && !listed:
			t.Errorf("%s is not a strategy.MemoryReporter: /metrics would walk its keys in the node's loop at every scrape (StateBytes); keep a heap estimate as keys change (strategy/internal/memsize)", info.Name)
		case ok && listed:
			t.Errorf("%s is a strategy.MemoryReporter now: take it out of wireSizeOnly and the docs' list of strategies reporting the wire size", info.Name)
		}
	}
}
