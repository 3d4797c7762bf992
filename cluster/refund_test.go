package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/rule"
)

// TestChargeAndRefundThroughNodes: on two owner nodes with overdraft
// (burst 5, a rate that refills nothing during the test), a charge of 12
// made at the node that does not own the key is refused (12 > 5) but
// taken at the owner, and checks at both nodes are refused (debt 7); a
// refund of 10 sent from that node reaches the owner (level 3): three
// checks of 1 are admitted there, the fourth refused. A strategy that
// keeps no bucket per key refuses Refund with ErrNoRefund.
func TestChargeAndRefundThroughNodes(t *testing.T) {
	c := newCluster(t, 2, false, ownerRule("overdraft=true", "max_debt=10"), rule.Rule{Name: "g", Rate: slow, Burst: 5, Strategy: "gcounter"})
	key := keyOwnedBy(t, "n0", c.ids)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d, err := c.nodes["n1"].CheckItem(ctx, BatchItem{Rule: "api", Key: key, Tokens: 12, Charge: true})
	if err != nil || d.Allowed {
		t.Fatalf("charge of 12 on a burst of 5: %+v %v, want refused", d, err)
	}
	for _, n := range c.ids {
		if d := check(t, c.nodes[n], "api", key, 1); d.Allowed {
			t.Fatalf("check at %s admitted after a charge of 12 on 5: the charge was not taken", n)
		}
	}
	if err := c.nodes["n1"].Refund(ctx, "api", key, 10); err != nil {
		t.Fatal(err)
	}
	// The refund is a message to n0, not acknowledged: wait for its credit.
	deadline := time.Now().Add(5 * time.Second)
	for !check(t, c.nodes["n0"], "api", key, 1).Allowed {
		if time.Now().After(deadline) {
			t.Fatal("the refund never reached the owner")
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i, want := range []bool{true, true, false} {
		if got := check(t, c.nodes["n0"], "api", key, 1).Allowed; got != want {
			t.Fatalf("check %d after the refund: allowed %v, want %v (level 3 after a refund of 10 on a debt of 7)", i+2, got, want)
		}
	}
	if err := c.nodes["n0"].Refund(ctx, "g", key, 1); !errors.Is(err, ErrNoRefund) {
		t.Fatalf("Refund under gcounter: %v, want ErrNoRefund", err)
	}
}
