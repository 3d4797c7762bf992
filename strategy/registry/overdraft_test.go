package registry

import (
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/strattest"
)

// TestOverdraftStrategies: the strategies that declare the overdraft
// parameters are exactly those strategy.OverdraftStrategies names, each
// implements strategy.Refunder, and every other strategy refuses
// overdraft=true, in its declarations and its constructor, with an error
// that names it and says it does not implement overdraft.
func TestOverdraftStrategies(t *testing.T) {
	var with []string
	for _, info := range List() {
		_, declared := strategy.FindParam(info.Params, strategy.OverdraftParam)
		_, debt := strategy.FindParam(info.Params, strategy.MaxDebtParam)
		if declared != debt {
			t.Errorf("%s declares one of overdraft and max_debt without the other", info.Name)
		}
		if declared {
			with = append(with, info.Name)
			s, err := newStrategy(t, info, "overdraft=true")
			if err != nil {
				t.Fatalf("%s: overdraft=true: %v", info.Name, err)
			}
			if _, ok := s.(strategy.Refunder); !ok {
				t.Errorf("%s declares overdraft but does not implement strategy.Refunder", info.Name)
			}
			if err := build(t, info, "overdraft=false", "max_debt=3"); err == nil || !strings.Contains(err.Error(), "max_debt") {
				t.Errorf("%s: max_debt with overdraft=false: %v, want an error naming max_debt", info.Name, err)
			}
			if err := build(t, info, "max_debt=0"); err == nil || !strings.Contains(err.Error(), "at least 1") {
				t.Errorf("%s: max_debt=0: %v, want an error saying at least 1", info.Name, err)
			}
			continue
		}
		for _, err := range []error{
			strategy.CheckParam(info.Name, info.Params, strategy.OverdraftParam, "true"),
			build(t, info, "overdraft=true"),
			build(t, info, "max_debt=10"),
		} {
			if err == nil || !strings.Contains(err.Error(), "strategy "+info.Name+" does not implement overdraft") {
				t.Errorf("%s: overdraft: %v, want \"strategy %s does not implement overdraft\"", info.Name, err, info.Name)
			}
		}
	}
	if got := strings.Join(with[:len(with)-1], ", ") + " and " + with[len(with)-1]; got != strategy.OverdraftStrategies {
		t.Errorf("strategies declaring overdraft: %s; strategy.OverdraftStrategies says %s", got, strategy.OverdraftStrategies)
	}
}

// TestOverdraftChargeAndRefundAcrossNodes: on two nodes of each strategy
// that forwards (owner, lease) and on one node of the others, with a
// rule of 1 token/s, burst 5, max_debt 10: a charge of 12 made at the
// node that does not own the key is refused (12 > 5) but taken, down to a
// debt of 7; every check is refused until the refill repays it; at 6 s
// (debt 1) a refund of 1 sent from that node, delivered twice, is credited
// once: the key admits a check again at 7 s, not before (checked at the
// key's owner: lease's other node keeps the owner's hint that the bucket
// is empty until 8 s, as after a lease returned). Every message goes
// through the peer encoding (strattest.Relay).
func TestOverdraftChargeAndRefundAcrossNodes(t *testing.T) {
	rate := bucket.Rate{Tokens: 1, Per: time.Second}
	for _, name := range []string{"central", "local", "static", "owner", "lease"} {
		t.Run(name, func(t *testing.T) {
			info, err := Lookup(name)
			if err != nil {
				t.Fatal(err)
			}
			members := []string{"n1", "n2"}
			if name != "owner" && name != "lease" {
				members = members[:1]
			}
			var nodes []strategy.NodeID
			var ss []strategy.Strategy
			for _, m := range members {
				s, err := info.New(strattest.Config(t, m, members, rate, 5, "overdraft=true", "max_debt=10"))
				if err != nil {
					t.Fatal(err)
				}
				nodes, ss = append(nodes, strategy.NodeID(m)), append(ss, s)
			}
			key := "k"
			own := rendezvous.Owner(key, nodes)
			at := nodes[0] // the node that does not own key, when there are two
			if len(nodes) == 2 && own == at {
				at = nodes[1]
			}
			r := strattest.NewRelay(t, nodes, ss)
			r.Dup = true
			r.Start(0)
			id := uint64(0)
			ask := func(now time.Duration, n int64, charge bool, at strategy.NodeID) bool {
				id++
				r.Request(now, at, strategy.Request{ID: id, Key: key, Tokens: n, Arrival: now, Charge: charge})
				r.Tick(now)
				d, ok := r.Got[id]
				if !ok {
					t.Fatalf("request %d at %v undecided", id, now)
				}
				return d.Allowed
			}
			if ask(0, 12, true, at) {
				t.Fatal("a charge of 12 on a burst of 5 was allowed")
			}
			for _, now := range []time.Duration{0, time.Second, 6 * time.Second} {
				if ask(now, 1, false, at) {
					t.Fatalf("a check at %v was admitted: the charge of 12 was not taken (debt 7 until 8 s)", now)
				}
			}
			r.Do(6*time.Second, at, func(s strategy.Strategy, fx *strategy.Effects) {
				id++
				s.(strategy.Refunder).Refund(6*time.Second, id, key, 1, fx)
			})
			r.Tick(6 * time.Second)
			// Debt 7 - 6 s of refill + 1 refunded: level 0 at 6 s, one
			// token at 7 s.
			if ask(6999*time.Millisecond, 1, false, own) {
				t.Fatal("a check at 6.999 s was admitted: the refund was credited twice")
			}
			if !ask(7*time.Second, 1, false, own) {
				t.Fatal("a check at 7 s was refused: the refund was not credited")
			}
		})
	}
}
