package statestore_test

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/statestore"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
)

// changesRule is one rule the property drives: its strategy and shape.
type changesRule struct {
	name, strat string
	cfg         strategy.Config
	s           strategy.Strategy
	members     int // the members it was told
}

func (r *changesRule) start(t *rapid.T) {
	info, err := registry.Lookup(r.strat)
	if err != nil {
		t.Fatal(err)
	}
	s, err := info.New(r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	var fx strategy.Effects
	s.Start(0, &fx)
	r.s, r.members = s, 1
}

// rate is the rate of r's buckets at this node: the rule's, for static
// its share r/N over the members.
func (r *changesRule) rate() bucket.Rate {
	if r.strat != "static" {
		return r.cfg.Rate
	}
	share, err := r.cfg.Rate.Div(int64(r.members))
	if err != nil {
		panic(err)
	}
	return share
}

// refilled is st's level refilled to now at r's rate (exact, as package
// bucket refills), in ticks: what a restart at now restores.
func (r *changesRule) refilled(t *rapid.T, st *strategy.KeyState, now time.Duration) int64 {
	rate := r.rate()
	if st.TicksPerToken != int64(rate.Per) {
		t.Fatalf("rule %q key %q: %d ticks per token, want %d (rate %v)", r.name, st.Key, st.TicksPerToken, int64(rate.Per), rate)
	}
	if now <= st.At || st.Level >= st.Capacity {
		return st.Level
	}
	dt, need := int64(now-st.At), st.Capacity-st.Level
	if dt >= need/rate.Tokens+1 {
		return st.Capacity
	}
	return min(st.Level+dt*rate.Tokens, st.Capacity)
}

// TestSnapshotChangesProperty drives a rule of local, static or owner and
// one of local beside it with random checks and charges (under overdraft:
// debts), time steps, ticks (the sweeps of full buckets), membership
// changes (owner: keys change hands; static: every bucket re-rated), a
// rule's strategy replaced (a reload), and snapshots into a
// statestore.Store as limiter's persister takes them: of changes
// (strategy.ChangeSnapshotter.SnapshotChanges) while the chain holds;
// whole at the start, when a strategy cannot tell its changes, when the
// store wants one (WantFull: a compaction) or the draw asks for one, and
// after a snapshot whose write failed (taken, then dropped). After every
// write, the store's loaded state refilled to that time gives every key
// exactly the level a full Snapshot at the same time gives (a key absent
// from one side must be full on the other): a restart restores no more
// tokens than a full snapshot would, and every change made before the
// snapshot is in the store.
func TestSnapshotChangesProperty(t *testing.T) {
	dir := t.TempDir()
	run := 0
	rapid.Check(t, func(t *rapid.T) {
		run++
		store, err := statestore.Open(fmt.Sprintf("%s/%d", dir, run))
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		rate := bucket.Rate{Tokens: rapid.Int64Range(1, 4).Draw(t, "tokens"), Per: time.Second}
		burst := rapid.Int64Range(1, 4).Draw(t, "burst")
		params, err := strategy.ParseParams([]string{"max_debt=3"})
		if err != nil {
			t.Fatal(err)
		}
		cfg := func(seed uint64) strategy.Config {
			return strategy.Config{Self: "n0", Members: []strategy.NodeID{"n0"}, Rate: rate, Burst: burst,
				Rand: rand.New(rand.NewPCG(seed, 2)), Params: params}
		}
		rules := []*changesRule{
			{name: "x", strat: rapid.SampledFrom([]string{"local", "static", "owner"}).Draw(t, "strategy"), cfg: cfg(1)},
			{name: "y", strat: "local", cfg: cfg(3)},
		}
		for _, r := range rules {
			r.start(t)
		}
		keys := []string{"a", "b", "c", "d", "e", "f", "g"}
		var now time.Duration
		var id uint64
		var fx strategy.Effects
		chained := false
		for step := range rapid.IntRange(1, 60).Draw(t, "steps") {
			r := rules[rapid.IntRange(0, 1).Draw(t, "rule")]
			switch rapid.IntRange(0, 9).Draw(t, fmt.Sprint("action ", step)) {
			case 0, 1, 2:
				id++
				req := strategy.Request{ID: id, Key: rapid.SampledFrom(keys).Draw(t, "key"), Tokens: rapid.Int64Range(1, 3).Draw(t, "n"),
					Arrival: now, Charge: rapid.Bool().Draw(t, "charge")}
				r.s.Request(now, req, &fx)
			case 3, 4:
				now += time.Duration(rapid.Int64Range(0, 3000).Draw(t, "ms")) * time.Millisecond
			case 5:
				r.s.Tick(now, &fx)
			case 6:
				if r.strat != "local" && rapid.IntRange(0, 2).Draw(t, "members") == 0 {
					members := []strategy.NodeID{"n0"}
					if r.members == 1 {
						members = append(members, "n1")
					}
					r.s.SetMembers(now, members, &fx)
					r.members = len(members)
				}
			case 7:
				if rapid.IntRange(0, 4).Draw(t, "reload") == 0 {
					r.cfg.Rand = rand.New(rand.NewPCG(uint64(step), 5))
					r.start(t) // a changed rule: a fresh strategy, full buckets
				}
			default:
				full := rapid.IntRange(0, 3).Draw(t, "full") == 0
				drop := rapid.IntRange(0, 5).Draw(t, "drop") == 0
				chained = saveChanges(t, store, rules, now, full || !chained || store.WantFull(), drop)
				if !drop {
					checkStore(t, store, rules, now)
				}
			}
			fx.Reset()
		}
	})
}

// saveChanges takes one snapshot of rules at now (every rule whole when
// whole) and saves it, as limiter's persister does: a snapshot the store
// refuses as changes (statestore.ErrNeedFull) is taken again whole; with
// drop the snapshot is taken but not written (a failed write). It reports
// whether the chain of changes holds.
func saveChanges(t *rapid.T, store *statestore.Store, rules []*changesRule, now time.Duration, whole, drop bool) bool {
	snap := statestore.Snapshot{Node: "n0", Taken: time.Unix(0, int64(now)), Rules: map[string]statestore.RuleState{}}
	for _, r := range rules {
		rs := statestore.RuleState{Strategy: r.strat}
		emit := func(st strategy.KeyState) { rs.States = append(rs.States, st) }
		cs := r.s.(strategy.ChangeSnapshotter)
		if !whole && cs.SnapshotChanges(now, emit, func(k string) { rs.Gone = append(rs.Gone, k) }) {
			rs.Changes = true
		} else {
			if len(rs.States) > 0 || len(rs.Gone) > 0 {
				t.Fatalf("rule %q: SnapshotChanges emitted %d states and %d gone keys, then reported false", r.name, len(rs.States), len(rs.Gone))
			}
			cs.SnapshotFull(now, emit)
		}
		snap.Rules[r.name] = rs
	}
	if drop {
		return false
	}
	err := store.Save(snap)
	if errors.Is(err, statestore.ErrNeedFull) && !whole {
		return saveChanges(t, store, rules, now, true, false)
	}
	if err != nil {
		t.Fatalf("save (whole %v): %v", whole, err)
	}
	return true
}

// checkStore compares the store's loaded state with a full snapshot of
// every rule at now, key by key, refilled to now.
func checkStore(t *rapid.T, store *statestore.Store, rules []*changesRule, now time.Duration) {
	loaded, found, err := store.Load()
	if err != nil || !found {
		t.Fatalf("load: found %v, %v", found, err)
	}
	for _, r := range rules {
		stored := map[string]*strategy.KeyState{}
		for _, st := range loaded.Rules[r.name].States {
			stored[st.Key] = &st
		}
		full := map[string]*strategy.KeyState{}
		r.s.(strategy.Snapshotter).Snapshot(now, func(st strategy.KeyState) { full[st.Key] = &st })
		keys := slices.Sorted(maps.Keys(stored))
		for k := range full {
			if stored[k] == nil {
				keys = append(keys, k)
			}
		}
		for _, k := range keys {
			got, want := stored[k], full[k]
			switch {
			case got != nil && want != nil:
				if g, w := r.refilled(t, got, now), r.refilled(t, want, now); g != w {
					t.Fatalf("rule %q (%s) key %q at %v: the store restores %d ticks (state %+v), a full snapshot %d (state %+v)",
						r.name, r.strat, k, now, g, *got, w, *want)
				}
			case got != nil:
				if g := r.refilled(t, got, now); g < got.Capacity {
					t.Fatalf("rule %q (%s) key %q at %v: the store restores %d ticks of %d (state %+v), a full snapshot has no state (a full bucket)",
						r.name, r.strat, k, now, g, got.Capacity, *got)
				}
			default:
				t.Fatalf("rule %q (%s) key %q at %v: the store has no state (a full bucket), a full snapshot %+v (%d ticks)",
					r.name, r.strat, k, now, *want, r.refilled(t, want, now))
			}
		}
	}
}
