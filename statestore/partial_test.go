package statestore

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// TestSaveChanges: a snapshot with a rule given as changes
// (RuleState.Changes) writes a put per state the file does not hold and
// a delete per gone key it holds (a gone key it does not hold, and a put
// of the value it holds, write nothing), keeps every other key, and loads
// as the whole snapshot it stands for; it is refused with ErrNeedFull,
// writing nothing, before any Save, after a failed one and when the rules
// differ; a key twice in a rule's changes is an error; WantFull reports a
// log past its limit, and the next whole Save compacts it.
func TestSaveChanges(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	whole := sample(2000)
	changes := func(states []strategy.KeyState, gone ...string) Snapshot {
		return Snapshot{Node: "n1", Taken: whole.Taken, Rules: map[string]RuleState{
			"api":   {Strategy: "owner", States: states, Gone: gone, Changes: true},
			"empty": {Strategy: "static", Changes: true},
		}}
	}
	if err := s.Save(changes(nil)); !errors.Is(err, ErrNeedFull) || !s.WantFull() {
		t.Fatalf("changes before any Save: %v (WantFull %v), want ErrNeedFull", err, s.WantFull())
	}
	if err := s.Save(whole); err != nil || s.WantFull() {
		t.Fatalf("whole Save: %v (WantFull %v)", err, s.WantFull())
	}
	api := slices.Clone(whole.Rules["api"].States)
	api[3].Level++
	put := []strategy.KeyState{api[3], api[4], {Key: "new", Level: 1, Capacity: 2, TicksPerToken: 1, At: 5}}
	if err := s.Save(changes(put, api[7].Key, "never-stored")); err != nil {
		t.Fatal(err)
	}
	if got := s.LastSave(); got.Records != 3 || got.Keys != 2000 || got.Compacted {
		t.Fatalf("changes of 1 key changed, 1 unchanged, 1 new, 1 gone, 1 gone never stored: %+v, want 3 records (a put of the changed and the new key, a delete), 2000 keys", got)
	}
	want := sample(0)
	want.Rules["api"] = RuleState{Strategy: "owner", States: append(slices.Delete(api, 7, 8), put[2])}
	loaded, _, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	sameSnapshot(t, loaded, want)

	if err := s.Save(changes([]strategy.KeyState{api[1]}, api[1].Key)); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("a key put and gone in one snapshot: %v, want an error naming it twice", err)
	}
	if err := s.Save(changes(nil)); !errors.Is(err, ErrNeedFull) {
		t.Fatalf("changes after a failed Save: %v, want ErrNeedFull", err)
	}
	if err := s.Save(want); err != nil {
		t.Fatal(err)
	}
	other := changes(nil)
	other.Rules["new-rule"] = RuleState{Strategy: "local"}
	if err := s.Save(other); !errors.Is(err, ErrNeedFull) {
		t.Fatalf("changes with a rule added: %v, want ErrNeedFull", err)
	}
	if err := s.Save(want); err != nil {
		t.Fatal(err)
	}
	// The log's limit is a quarter of the base (2000 keys: 500 records).
	var many []strategy.KeyState
	for i := range 600 {
		many = append(many, strategy.KeyState{Key: fmt.Sprint("more-", i), Level: 0, Capacity: 2, TicksPerToken: 1, At: 5})
	}
	if err := s.Save(changes(many)); err != nil || s.LastSave().Compacted || !s.WantFull() {
		t.Fatalf("600 changes over a base of 2000: %v, %+v, WantFull %v; want them appended, and WantFull", err, s.LastSave(), s.WantFull())
	}
	want.Rules["api"] = RuleState{Strategy: "owner", States: append(want.Rules["api"].States, many...)}
	if err := s.Save(want); err != nil || !s.LastSave().Compacted || s.WantFull() {
		t.Fatalf("whole Save after the log passed its limit: %v, %+v, WantFull %v; want a compaction", err, s.LastSave(), s.WantFull())
	}
	if loaded, _, err = s.Load(); err != nil {
		t.Fatal(err)
	}
	sameSnapshot(t, loaded, want)
}
