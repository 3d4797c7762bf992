package adaptive

import (
	"fmt"
	"math"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/internal/peerbound"
)

// Receive handles a report (this node as adaptor) or an epoch's shares.
// Errors: an undecodable payload, an empty body, a stat or share with an
// empty key, keys not sorted or repeated, negative statistics, a share
// whose units differ from this node's, or rate units or burst outside
// [0, units] and [0, b]; and (ours, peerbound) a peak backlog above the
// burst b (the virtual backlog is capped at b), or an epoch above
// maxEpoch(now): no adaptor can have numbered so many epochs by now (a
// huge epoch would make the next one wrap to 0 and every node ignore the
// adaptor from then on). Errors change no state. A valid message that is
// out of date (a report while this node is not the adaptor or from a
// non-member, shares from a node that is not this node's adaptor, an old
// epoch, another membership) is ignored.
func (a *Adaptive) Receive(now time.Duration, from strategy.NodeID, payload []byte, fx *strategy.Effects) error {
	var m peerv1.AdaptiveMessage
	if err := proto.Unmarshal(payload, &m); err != nil {
		return fmt.Errorf("adaptive: message from %s does not decode: %w", from, err)
	}
	switch b := m.Body.(type) {
	case *peerv1.AdaptiveMessage_Report:
		if b.Report == nil {
			return fmt.Errorf("adaptive: empty report from %s", from)
		}
		if err := a.validReport(now, b.Report); err != nil {
			return fmt.Errorf("adaptive: report from %s: %w", from, err)
		}
		if a.adaptor() != a.self || !slices.Contains(a.members, from) || from == a.self {
			return nil
		}
		a.reports[from] = b.Report
		a.mem.holdReport(from, b.Report, true)
		return nil
	case *peerv1.AdaptiveMessage_Shares:
		if b.Shares == nil {
			return fmt.Errorf("adaptive: empty shares from %s", from)
		}
		if err := a.validShares(now, b.Shares); err != nil {
			return fmt.Errorf("adaptive: shares from %s: %w", from, err)
		}
		if from != a.adaptor() {
			return nil
		}
		a.apply(now, b.Shares, fx)
		return nil
	default:
		return fmt.Errorf("adaptive: message from %s has no body", from)
	}
}

// maxEpoch bounds the epochs a peer may report by now: an adaptor numbers
// at most one new epoch per step (its Tick), one above every epoch it has
// seen, so with at most k nodes acting as adaptor at once (views differ
// while membership changes) the newest epoch is at most
// k * (ticks by now + 1). k is taken as max(members, 16), and now gets
// peerbound.ClockSkew of slack.
func (a *Adaptive) maxEpoch(now time.Duration) uint64 {
	ticks := uint64(max(now+peerbound.ClockSkew, 0)/a.step) + 2
	k := uint64(max(len(a.members), 16))
	if ticks > math.MaxUint64/(2*k) {
		return math.MaxUint64 / 2
	}
	return ticks * k
}

func (a *Adaptive) validReport(now time.Duration, r *peerv1.AdaptiveReport) error {
	if r.Epoch > a.maxEpoch(now) {
		return fmt.Errorf("epoch %d above the %d epochs possible by now %v", r.Epoch, a.maxEpoch(now), now)
	}
	prev := ""
	for i, s := range r.Stats {
		if err := keyAfter("stat", i, s.Key, prev); err != nil {
			return err
		}
		prev = s.Key
		switch {
		case s.Offered < 0 || s.PeakBacklog < 0:
			return fmt.Errorf("stat %q: negative offered %d or peak backlog %d", s.Key, s.Offered, s.PeakBacklog)
		case s.PeakBacklog > a.burst:
			return fmt.Errorf("stat %q: peak backlog %d above the burst %d (the backlog is capped at it)", s.Key, s.PeakBacklog, a.burst)
		}
	}
	return nil
}

// keyAfter checks the i-th key of a list whose keys must be non-empty and
// strictly ascending; prev is the key before it ("" for the first). what
// names the list's elements in the error.
func keyAfter(what string, i int, key, prev string) error {
	switch {
	case key == "":
		return fmt.Errorf("%s %d: empty key", what, i)
	case key <= prev:
		return fmt.Errorf("%s %d: key %q not after %q", what, i, key, prev)
	}
	return nil
}

func (a *Adaptive) validShares(now time.Duration, m *peerv1.AdaptiveShares) error {
	if m.Epoch > a.maxEpoch(now) {
		return fmt.Errorf("epoch %d above the %d epochs possible by now %v", m.Epoch, a.maxEpoch(now), now)
	}
	if m.Units != a.units {
		return fmt.Errorf("split in %d units, this node uses %d (different rate configuration?)", m.Units, a.units)
	}
	prev := ""
	for i, s := range m.Shares {
		if err := keyAfter("share", i, s.Key, prev); err != nil {
			return err
		}
		prev = s.Key
		switch {
		case s.RateUnits < 0 || s.RateUnits > a.units:
			return fmt.Errorf("share %q: rate units %d outside [0, %d]", s.Key, s.RateUnits, a.units)
		case s.Burst < 0 || s.Burst > a.burst:
			return fmt.Errorf("share %q: burst %d outside [0, %d]", s.Key, s.Burst, a.burst)
		}
	}
	return nil
}

// SetMembers follows membership (see the package documentation). A view
// without this node is ignored.
func (a *Adaptive) SetMembers(now time.Duration, members []strategy.NodeID, fx *strategy.Effects) {
	joined := false
	for _, m := range members {
		if !slices.Contains(a.members, m) {
			joined = true
		}
	}
	if slices.Equal(members, a.members) {
		return
	}
	if err := a.setMembers(members); err != nil {
		return
	}
	for n := range a.reports {
		if !slices.Contains(members, n) {
			delete(a.reports, n)
		}
	}
	if a.adaptor() != a.self {
		clear(a.reports)
	}
	if joined {
		a.shares, a.pending = map[string]share{}, nil
	}
	a.conserveCap()
	for k := range a.keys {
		a.refresh(now, k, fx)
	}
	a.recountShares()
}

// conserveCap, under conserve while members are missing (k < N), lowers
// every applied share to at most the static split over N and drops a
// pending epoch: an epoch message lost at the cut would otherwise leave a
// node on its older shares while the adaptor raised to the newer ones (an
// over-commit no later epoch repairs during the split, since none is
// sent). The shares then sum to at most (r, b) over all N nodes whatever
// epoch each holds.
func (a *Adaptive) conserveCap() {
	if !a.missing {
		return
	}
	a.pending = nil
	for k, sh := range a.shares {
		if rateLess(a.defRate, sh.rate) {
			sh.rate = a.defRate
		}
		sh.burst = min(sh.burst, a.defBurst)
		a.shares[k] = sh
	}
}

// StateBytes is the encoded size of the node's state: per key its bucket,
// backlog and history ring (see keyStateBytes) and its key, per share its
// key, rate and burst, and at the adaptor the reports it holds.
func (a *Adaptive) StateBytes() int {
	n := 0
	for k := range a.keys {
		n += len(k) + a.keyStateBytes()
	}
	for _, sm := range []map[string]share{a.shares, a.pending} {
		for k := range sm {
			n += len(k) + 2 + 3*(1+9)
		}
	}
	for _, r := range a.reports {
		n += proto.Size(r)
	}
	return n
}
