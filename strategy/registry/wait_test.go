package registry

import (
	"strings"
	"testing"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// TestWaitingMode: every strategy SRTM §5.2's waiting mode applies to
// implements it (the sub-token-bucket ones included: issue 25 item 3),
// and gcounter and tbqueue refuse it naming themselves and their seed's
// chapter (strategy.CheckWait).
func TestWaitingMode(t *testing.T) {
	waiters := map[string]bool{"central": true, "local": true, "static": true, "owner": true, "gdrl": true, "adaptive": true, "lease": true}
	refusers := map[string]string{"gcounter": "002 ch. 3", "tbqueue": "002 ch. 4"}
	for _, info := range List() {
		s, err := info.New(probeConfig())
		if err != nil {
			t.Fatalf("%s: %v", info.Name, err)
		}
		err = strategy.CheckWait(info.Name, s)
		switch {
		case waiters[info.Name] && err != nil:
			t.Errorf("%s: %v, want waiting mode", info.Name, err)
		case refusers[info.Name] != "" && (err == nil || !strings.HasPrefix(err.Error(), info.Name+" does not implement waiting mode (") || !strings.Contains(err.Error(), refusers[info.Name])):
			t.Errorf("%s: CheckWait = %v, want a refusal naming it and %s", info.Name, err, refusers[info.Name])
		}
	}
}
