package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenmesh/tokenmesh/eval"
)

// sim --max-wait refuses a strategy without waiting mode named in
// --strategies, naming it and why (SRTM §5.2; strategy.CheckWait), and
// under all notes each one instead; it sets lease's and adaptive's
// max_wait unless given.
func TestCheckWaiting(t *testing.T) {
	for _, list := range []string{"central,gcounter", "tbqueue"} {
		infos, err := eval.ParseStrategies(list)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(list, "central,")
		if _, err := checkWaiting(list, infos, time.Second); err == nil || !strings.Contains(err.Error(), name+" does not implement waiting mode (") {
			t.Errorf("--strategies %s --max-wait 1s: %v, want a refusal naming %s", list, err, name)
		}
		if _, err := checkWaiting(list, infos, 0); err != nil {
			t.Errorf("--strategies %s without --max-wait: %v", list, err)
		}
	}
	infos, err := eval.ParseStrategies("all")
	if err != nil {
		t.Fatal(err)
	}
	notes, err := checkWaiting("all", infos, time.Second)
	if err != nil || len(notes) != 3 || !strings.HasPrefix(notes[0], "gcounter ") || !strings.HasPrefix(notes[1], "tbqueue ") || !strings.HasPrefix(notes[2], "regionlease ") {
		t.Errorf("all: notes %q, err %v; want gcounter, tbqueue and regionlease noted", notes, err)
	}
	got := withMaxWaitParams([]string{"lease.max_wait=2s"}, time.Second)
	if !slices.Equal(got, []string{"lease.max_wait=2s", "adaptive.max_wait=1s"}) {
		t.Errorf("withMaxWaitParams: %q", got)
	}
}
