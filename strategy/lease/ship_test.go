package lease

import (
	"testing"
	"time"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/rendezvous"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// replicaShips runs o's Tick at now and returns the replica states it
// sent to node to, as the receiver rebuilds their times (base + since),
// and how many messages carried them.
func replicaShips(t *testing.T, o *Lease, now time.Duration, to strategy.NodeID) (states []*peerv1.LeaseReplica, msgs int) {
	t.Helper()
	fx := &strategy.Effects{}
	o.Tick(now, fx)
	for _, m := range fx.Messages {
		if m.To != to {
			continue
		}
		switch b := decode(t, m.Payload).Body.(type) {
		case *peerv1.LeaseMessage_Replica:
			states = append(states, b.Replica)
			msgs++
		case *peerv1.LeaseMessage_Replicas:
			for _, s := range b.Replicas.States {
				s.SinceBaseNs += b.Replicas.BaseNs
				states = append(states, s)
			}
			msgs++
		}
	}
	return states, msgs
}

// TestShipsOnlyWhatReplicasCannotCompute: the owner ships a key's state
// after tokens were taken, not after refused requests or a grant of 0
// tokens (the replica's state refilled is the pool then); a ship of one
// key is a LeaseReplica alone with its time absolute; the replica that
// takes the key over continues from it.
func TestShipsOnlyWhatReplicasCannotCompute(t *testing.T) {
	key := keyRanked("n0", "n1")
	o := newNode(t, "n0") // rate 10/s, burst 20, hold 0, sync 10ms
	r := newNode(t, "n1")
	if got := admitted(o, key, 0, 20, 1); got != 20 {
		t.Fatalf("admitted %d of a full bucket, want 20", got)
	}
	states, msgs := replicaShips(t, o, 10*time.Millisecond, "n1")
	if len(states) != 1 || msgs != 1 || states[0].Key != key || states[0].LevelTicks != int64(time.Second)/10 || states[0].SinceBaseNs != int64(10*time.Millisecond) {
		t.Fatalf("after 20 tokens taken: shipped %v in %d messages, want %q at 0.1 token (1e8 ticks) at 10ms in 1", states, msgs, key)
	}
	// Refused requests and an ask granted 0 tokens change nothing a
	// replica cannot compute: no ship.
	if got := admitted(o, key, 20*time.Millisecond, 5, 100); got != 0 {
		t.Fatalf("admitted %d from 0.2 tokens, want 0", got)
	}
	fx := &strategy.Effects{}
	if err := o.Receive(40*time.Millisecond, "n2", ask(key, 1, 3, int64(40*time.Millisecond)), fx); err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Duration{30, 40, 50, 60} {
		if states, _ := replicaShips(t, o, at*time.Millisecond, "n1"); len(states) != 0 {
			t.Fatalf("at %dms: shipped %v after refusals and an empty grant, want nothing", at, states)
		}
	}
	// A token taken at 200 ms (2 refilled): shipped at the next sync, and
	// n1 takes over from it when n0 is gone.
	if got := admitted(o, key, 200*time.Millisecond, 1, 200); got != 1 {
		t.Fatalf("admitted %d at 200ms, want 1", got)
	}
	fx = &strategy.Effects{}
	o.Tick(210*time.Millisecond, fx)
	for _, m := range fx.Messages {
		if m.To == "n1" {
			if err := r.Receive(212*time.Millisecond, "n0", m.Payload, &strategy.Effects{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	r.SetMembers(250*time.Millisecond, []strategy.NodeID{"n1", "n2"}, &strategy.Effects{})
	// 2.1 tokens at 210 ms less the one taken, 0.4 refilled since: 1.5.
	if got := admitted(r, key, 250*time.Millisecond, 5, 300); got != 1 {
		t.Fatalf("n1 admitted %d after the takeover, want 1 (1.5 tokens)", got)
	}
}

// TestShipsOfOneSyncShareATime: the states of one sync to one peer go in
// one LeaseReplicas whose base_ns is their time (each since_base_ns 0), a
// lease end counted from the state's time.
func TestShipsOfOneSyncShareATime(t *testing.T) {
	var keys []string
	for i := 0; len(keys) < 2; i++ {
		k := string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
		if r := rendezvous.Rank(nil, k, members, 2); r[0] == "n0" && r[1] == "n1" {
			keys = append(keys, k)
		}
	}
	o := newNode(t, "n0")
	admitted(o, keys[0], 0, 1, 1)
	fx := &strategy.Effects{}
	if err := o.Receive(0, "n2", ask(keys[1], 1, 3, 0), fx); err != nil {
		t.Fatal(err)
	}
	fx = &strategy.Effects{}
	o.Tick(10*time.Millisecond, fx)
	var got *peerv1.LeaseReplicas
	for _, m := range fx.Messages {
		if m.To == "n1" {
			got = decode(t, m.Payload).GetReplicas()
		}
	}
	if got == nil || got.BaseNs != int64(10*time.Millisecond) || len(got.States) != 2 {
		t.Fatalf("shipped %v, want 2 states with base_ns 10ms", got)
	}
	for _, s := range got.States {
		if s.SinceBaseNs != 0 {
			t.Errorf("%q: since_base_ns %d, want 0", s.Key, s.SinceBaseNs)
		}
		if s.Key == keys[1] && (s.LentTokens != 3 || s.LentForNs != int64(500*time.Millisecond-10*time.Millisecond)) {
			t.Errorf("%q: %d lent for %v, want 3 for 490ms (ttl from the ask at 0)", s.Key, s.LentTokens, time.Duration(s.LentForNs))
		}
	}
}
