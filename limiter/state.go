package limiter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenmesh/tokenmesh/cluster"
	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/statestore"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// DefaultSnapshotInterval is Config.SnapshotInterval when zero (the
// configuration file's default, config.DefaultSnapshotInterval: 1 s).
const DefaultSnapshotInterval = config.DefaultSnapshotInterval

// RestoreInfo says what Start restored from Config.StateDir.
type RestoreInfo struct {
	File  string         // the state file; "" without StateDir
	Found bool           // a snapshot was there
	Taken time.Time      // when it was taken (wall clock)
	Age   time.Duration  // how long before Start it was taken
	Keys  map[string]int // key states handed to each rule whose strategy keeps them
	// Discarded is the path a corrupt file was moved to
	// (Config.DiscardBadState); "" if none.
	Discarded string
}

// SnapshotStats counts the snapshots written to Config.StateDir.
type SnapshotStats struct {
	Saved  int64 // snapshots written
	Errors int64 // snapshots that failed (logged)
	Keys   int64 // key states in the last one written
	// Written is the states the last one wrote: the keys that changed
	// since the one before (delta records, deletes included), or all of
	// them at a compaction (statestore).
	Written     int64
	Compactions int64         // snapshots that rewrote the whole file's base
	Full        int64         // snapshots the loop took whole (every key), not as changes
	LoopTime    time.Duration // the node's loop busy copying the last one
	WriteTime   time.Duration // writing (and fsyncing) the last one
}

// persister runs a node's snapshots into its statestore.
type persister struct {
	store    *statestore.Store
	name     string
	interval time.Duration
	log      *slog.Logger

	mu        sync.Mutex // one snapshot at a time (the ticker's and Close's)
	lastEmpty bool
	buf       map[string]cluster.RuleSnapshot // the last snapshot's slices, reused
	// chained: the store holds every change the strategies reported up
	// to the last snapshot, so the next may be of changes alone
	// (cluster.Node.SnapshotChanges); false at the start and after any
	// error, when the next is whole.
	chained bool
	stats   struct {
		saved, errors, keys, loopNs, writeNs, written, compactions, full atomic.Int64
	}
	done chan struct{} // closed when run returns
}

// openState opens cfg.StateDir's store and loads its snapshot. A corrupt
// file fails, unless cfg.DiscardBadState: then it is renamed aside and
// the node starts empty. The caller closes the store.
func openState(cfg Config, name string, log *slog.Logger) (*statestore.Store, statestore.Snapshot, RestoreInfo, error) {
	info := RestoreInfo{}
	store, err := statestore.Open(cfg.StateDir)
	var snap statestore.Snapshot
	if err == nil {
		info.File = store.Path()
		snap, info.Found, err = store.Load()
		if err != nil {
			_ = store.Close()
		}
	}
	if err == nil {
		return store, snap, info, nil
	}
	if !errors.Is(err, statestore.ErrCorrupt) {
		return nil, snap, info, fmt.Errorf("limiter: state_dir: %w", err)
	}
	if !cfg.DiscardBadState {
		return nil, snap, info, fmt.Errorf("limiter: state_dir: %w (Config.DiscardBadState, serve --discard-bad-state, moves it aside and starts empty)", err)
	}
	file := cfg.StateDir + string(os.PathSeparator) + statestore.FileName
	info.Discarded = fmt.Sprintf("%s.bad-%d", file, time.Now().Unix())
	if rerr := os.Rename(file, info.Discarded); rerr != nil {
		return nil, snap, info, fmt.Errorf("limiter: state_dir: %v; moving it aside: %w", err, rerr)
	}
	log.Warn("state file is corrupt: moved aside, starting with no saved state (every key gets a fresh burst)",
		"file", file, "moved_to", info.Discarded, "error", err.Error())
	store, err = statestore.Open(cfg.StateDir)
	if err != nil {
		return nil, snap, info, fmt.Errorf("limiter: state_dir: %w", err)
	}
	info.File = store.Path()
	return store, statestore.Snapshot{}, info, nil
}

// restoreStates is the snapshot's states by rule, for cluster.Config.Restore,
// with a warning for every rule whose strategy or node changed.
func restoreStates(snap statestore.Snapshot, name string, rules []rule.Rule, log *slog.Logger) map[string][]strategy.KeyState {
	if snap.Node != "" && snap.Node != name {
		log.Warn("state file was written by another node name; restoring it anyway", "file_node", snap.Node, "node", name)
	}
	out := map[string][]strategy.KeyState{}
	for _, r := range rules {
		saved, ok := snap.Rules[r.Name]
		if !ok {
			continue
		}
		if saved.Strategy != r.Strategy {
			log.Warn("rule's strategy changed since the snapshot; restoring its bucket levels capped at the new buckets",
				"rule", r.Name, "was", saved.Strategy, "now", r.Strategy)
		}
		out[r.Name] = saved.States
	}
	return out
}

// snapshotDuty bounds the share of time spent on snapshots: the next one
// starts no sooner than snapshotDuty times the last one's duration (loop
// copy plus write) after it, whatever the interval. At 1M keys with 1%
// changed a snapshot of changes takes about 10-130 ms in the loop and
// 50 ms-0.3 s to write (statestore's delta log, no diff of every key), so
// it runs every second; a whole one (at the start, after an error or a
// reload, and for a compaction, about every 25th) 0.3-1.3 s in the loop
// and 3-6 s to write (docs/PERFORMANCE.md), after which the next waits
// ~15-30 s.
const snapshotDuty = 5

// run snapshots every interval (stretched by snapshotDuty) until stop is
// closed.
func (p *persister) run(node *cluster.Node, stop <-chan struct{}) {
	defer close(p.done)
	t := time.NewTimer(p.interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		start := time.Now()
		_ = p.save(node)
		t.Reset(max(p.interval, snapshotDuty*time.Since(start)) - time.Since(start))
	}
}

// save takes one snapshot in the node's loop and writes it outside: the
// changes since the last one (cluster.Node.SnapshotChanges: the loop busy
// in proportion to the keys changed), or every key when the chain of
// changes is broken (the first snapshot, an error) or the store wants a
// whole one to compact (statestore.Store.WantFull). A snapshot the store
// refuses as changes (statestore.ErrNeedFull: the rules changed) is taken
// again whole at once. An empty snapshot after an empty one is not
// written again.
func (p *persister) save(node *cluster.Node) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.saveOnce(node, !p.chained || p.store.WantFull())
	if errors.Is(err, statestore.ErrNeedFull) {
		err = p.saveOnce(node, true)
	}
	return err
}

// saveOnce is one snapshot (whole when full) and its write; on an error
// the chain of changes is broken (the next is whole).
func (p *persister) saveOnce(node *cluster.Node, full bool) error {
	p.chained = false
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t0 := time.Now()
	states, err := node.SnapshotChanges(ctx, full, p.buf)
	t1 := time.Now()
	if err != nil {
		p.stats.errors.Add(1)
		p.log.Error("snapshot failed", "error", err.Error())
		return err
	}
	p.buf = states // Save is done with them before the next snapshot
	snap := statestore.Snapshot{Node: p.name, Taken: t0, Rules: map[string]statestore.RuleState{}}
	whole, listed := true, 0
	for rule, rs := range states {
		snap.Rules[rule] = statestore.RuleState{Strategy: rs.Strategy, States: rs.States, Changes: rs.Changes, Gone: rs.Gone}
		whole = whole && !rs.Changes
		listed += len(rs.States) + len(rs.Gone)
	}
	if whole {
		p.stats.full.Add(1)
	}
	if whole && snap.Keys() == 0 && p.lastEmpty || !whole && listed == 0 && p.lastEmpty {
		p.chained = true // nothing to write: the store holds it
		return nil
	}
	if err := p.store.Save(snap); err != nil {
		if errors.Is(err, statestore.ErrNeedFull) {
			return err // save takes a whole one at once
		}
		p.stats.errors.Add(1)
		p.log.Error("writing the snapshot failed", "file", p.store.Path(), "error", err.Error())
		return err
	}
	p.chained = true
	last := p.store.LastSave()
	p.lastEmpty = last.Keys == 0
	p.stats.saved.Add(1)
	p.stats.keys.Store(int64(last.Keys))
	p.stats.written.Store(int64(last.Records))
	if last.Compacted {
		p.stats.compactions.Add(1)
	}
	p.stats.loopNs.Store(int64(t1.Sub(t0)))
	p.stats.writeNs.Store(int64(time.Since(t1)))
	return nil
}

// RestoreInfo is what Start restored from Config.StateDir (zero without
// it).
func (n *Node) RestoreInfo() RestoreInfo { return n.restore }

// SnapshotStats counts the snapshots written to Config.StateDir (zero
// without it).
func (n *Node) SnapshotStats() SnapshotStats {
	p := n.persist
	if p == nil {
		return SnapshotStats{}
	}
	return SnapshotStats{Saved: p.stats.saved.Load(), Errors: p.stats.errors.Load(), Keys: p.stats.keys.Load(),
		Written: p.stats.written.Load(), Compactions: p.stats.compactions.Load(), Full: p.stats.full.Load(),
		LoopTime: time.Duration(p.stats.loopNs.Load()), WriteTime: time.Duration(p.stats.writeNs.Load())}
}
