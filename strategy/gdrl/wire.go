package gdrl

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	peerv1 "github.com/tokenmesh/tokenmesh/api/peer/v1"
	"github.com/tokenmesh/tokenmesh/strategy"
)

func itemsMsg(items []item) []*peerv1.GdrlItem {
	out := make([]*peerv1.GdrlItem, len(items))
	for i, it := range items {
		out[i] = &peerv1.GdrlItem{Key: it.key, Capacity: it.c, Burst: it.b, Tokens: it.t}
	}
	return out
}

func itemsFrom(items []*peerv1.GdrlItem) []item {
	out := make([]item, len(items))
	for i, it := range items {
		out[i] = item{key: it.Key, c: it.Capacity, b: it.Burst, t: it.Tokens}
	}
	return out
}

func idMsg(id TransferID) *peerv1.GdrlTransferId {
	return &peerv1.GdrlTransferId{Src: string(id.Src), SrcInc: id.SrcInc, Dst: string(id.Dst), DstInc: id.DstInc, Seq: id.Seq}
}

func idFrom(m *peerv1.GdrlTransferId) TransferID {
	return TransferID{Src: strategy.NodeID(m.Src), SrcInc: m.SrcInc, Dst: strategy.NodeID(m.Dst), DstInc: m.DstInc, Seq: m.Seq}
}

func transferFrom(m *peerv1.GdrlTransfer) *transfer {
	return &transfer{id: idFrom(m.Id), items: itemsFrom(m.Items)}
}

func transfersMsg(ts []*transfer) []*peerv1.GdrlTransfer {
	out := make([]*peerv1.GdrlTransfer, len(ts))
	for i, t := range ts {
		out[i] = &peerv1.GdrlTransfer{Id: idMsg(t.id), Items: itemsMsg(t.items)}
	}
	return out
}

func transfersFrom(ms []*peerv1.GdrlTransfer) []*transfer {
	out := make([]*transfer, len(ms))
	for i, m := range ms {
		out[i] = transferFrom(m)
	}
	return out
}

// appliedMsg encodes duplicate filters, sorted by paying incarnation.
func appliedMsg(table filters) []*peerv1.GdrlApplied {
	keys := make([]srcKey, 0, len(table))
	for k := range table {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b srcKey) int {
		return cmpID(TransferID{Src: a.src, SrcInc: a.inc}, TransferID{Src: b.src, SrcInc: b.inc})
	})
	out := make([]*peerv1.GdrlApplied, len(keys))
	for i, k := range keys {
		e := table[k]
		out[i] = &peerv1.GdrlApplied{Src: string(k.src), SrcInc: k.inc, Seq: e.seq, Holes: slices.Clone(e.holes)}
	}
	return out
}

func appliedFrom(ms []*peerv1.GdrlApplied) filters {
	out := make(filters, len(ms))
	for _, m := range ms {
		k := srcKey{strategy.NodeID(m.Src), m.SrcInc}
		e := out[k]
		if e == nil {
			e = &filter{}
			out[k] = e
		}
		e.seq = max(e.seq, m.Seq)
		for _, h := range m.Holes {
			if h <= e.seq {
				e.addHole(h)
			}
		}
	}
	return out
}

// cmpID orders transfer ids by payer, destination and number.
func cmpID(a, b TransferID) int {
	return cmp.Or(
		cmp.Compare(a.Src, b.Src), cmp.Compare(a.SrcInc, b.SrcInc),
		cmp.Compare(a.Dst, b.Dst), cmp.Compare(a.DstInc, b.DstInc),
		cmp.Compare(a.Seq, b.Seq))
}

func (t *tombstone) msg() *peerv1.GdrlTombstone {
	return &peerv1.GdrlTombstone{Node: string(t.node), Inc: t.inc, Version: t.version, DefaultCapacity: t.dc, DefaultBurst: t.db,
		Items: itemsMsg(t.items), Applied: appliedMsg(t.applied), OnBehalf: transfersMsg(t.onBehalf), FenceDone: t.fenceDone,
		Absorbed: absorbedMsg(t.absorbed), GivenUp: t.givenUp, Lost: t.lost}
}

func tombFrom(m *peerv1.GdrlTombstone) *tombstone {
	return &tombstone{node: strategy.NodeID(m.Node), inc: m.Inc, version: m.Version, dc: m.DefaultCapacity, db: m.DefaultBurst,
		items: itemsFrom(m.Items), applied: appliedFrom(m.Applied), onBehalf: transfersFrom(m.OnBehalf), fenceDone: m.FenceDone,
		absorbed: absorbedFrom(m.Absorbed), givenUp: slices.Clone(m.GivenUp), lost: m.Lost}
}

// localMsg encodes a retired or draining tombstone (GdrlRecord.retired,
// .draining): without its duplicate filter, which it no longer uses.
func (t *tombstone) localMsg() *peerv1.GdrlTombstone {
	return &peerv1.GdrlTombstone{Node: string(t.node), Inc: t.inc, Version: t.version, DefaultCapacity: t.dc, DefaultBurst: t.db,
		Items: itemsMsg(t.items), OnBehalf: transfersMsg(t.onBehalf), FenceDone: t.fenceDone, Absorbed: absorbedMsg(t.absorbed)}
}

func tombsFrom(ms []*peerv1.GdrlTombstone) []*tombstone {
	if len(ms) == 0 {
		return nil
	}
	out := make([]*tombstone, len(ms))
	for i, m := range ms {
		out[i] = tombFrom(m)
	}
	return out
}

func absorbedMsg(as []*absorbedInh) []*peerv1.GdrlAbsorbed {
	if len(as) == 0 {
		return nil
	}
	out := make([]*peerv1.GdrlAbsorbed, len(as))
	for i, a := range as {
		out[i] = &peerv1.GdrlAbsorbed{Version: a.version, By: string(a.by), ByInc: a.byInc, DefaultCapacity: a.dc, DefaultBurst: a.db,
			Items: itemsMsg(a.items), GivenUp: transfersMsg(a.gaveUp), Passed: transfersMsg(a.passed), CreditsOnly: a.creditsOnly}
	}
	return out
}

// absorbedFrom decodes give-ups (a frame without the field, from a build
// before it, has none).
func absorbedFrom(ms []*peerv1.GdrlAbsorbed) []*absorbedInh {
	if len(ms) == 0 {
		return nil
	}
	out := make([]*absorbedInh, len(ms))
	for i, m := range ms {
		out[i] = &absorbedInh{version: m.Version, by: strategy.NodeID(m.By), byInc: m.ByInc, dc: m.DefaultCapacity, db: m.DefaultBurst,
			items: itemsFrom(m.Items), gaveUp: transfersFrom(m.GivenUp), passed: transfersFrom(m.Passed), creditsOnly: m.CreditsOnly}
	}
	return out
}

// heldFrom decodes the records a ward holds of its own wards out of its
// view (GdrlRecord.held).
func heldFrom(ms []*peerv1.GdrlHeldRecord) map[strategy.NodeID]heldRef {
	if len(ms) == 0 {
		return nil
	}
	out := make(map[strategy.NodeID]heldRef, len(ms))
	for _, m := range ms {
		out[strategy.NodeID(m.Node)] = heldRef{inc: m.Inc, version: m.Version}
	}
	return out
}

// msg encodes a held record (for StateBytes).
func (r *heldRecord) msg() *peerv1.GdrlRecord {
	m := &peerv1.GdrlRecord{Epoch: r.epoch, Version: r.version, DefaultCapacity: r.dc, DefaultBurst: r.db,
		Outbox: transfersMsg(r.outbox), Applied: appliedMsg(r.applied), Parts: 1<<numParts - 1 - 1<<partHeld, GivenUp: r.givenUp}
	for n, h := range r.held {
		m.Held = append(m.Held, &peerv1.GdrlHeldRecord{Node: string(n), Inc: h.inc, Version: h.version})
	}
	if len(m.Held) > 0 {
		m.Parts |= 1 << partHeld
	}
	keys := make([]string, 0, len(r.shares))
	for k := range r.shares {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := r.shares[k]
		m.Shares = append(m.Shares, &peerv1.GdrlShare{Key: k, Capacity: v[0], Burst: v[1]})
	}
	for _, t := range r.tombs {
		m.Tombstones = append(m.Tombstones, t.msg())
	}
	for _, t := range r.retired {
		m.Retired = append(m.Retired, t.localMsg())
	}
	for _, t := range r.draining {
		m.Draining = append(m.Draining, t.localMsg())
	}
	return m
}

// validate checks a decoded message before it may change any state. Errors
// name the sender and what is wrong: a zero incarnation, no body, a
// repeated key, an amount out of range (transfers, also inside records and
// fences, carry amounts in [0, C] and [0, B] units and at most their burst
// in tokens; probes, asks, records and fences any other amount within
// ±2C and ±2B units (twice the rule's whole capacity and burst), and no
// tokens), a demand, noise or recent count that is
// negative, non-finite or above 1e30, a transfer without a proper id or a
// plain transfer meant for another node, a record whose base is not below
// its version, a tombstone, fence or duplicate filter entry without an
// incarnation.
func (g *GDRL) validate(from strategy.NodeID, m *peerv1.GdrlMessage) error {
	// A share (or an inherited amount, a default share) is at most twice
	// the rule's whole capacity C and burst B in size (ours: peer values
	// are bounded). The shares of a key sum to (C, B); a share goes
	// negative only by a debt after a fence (at most what the node had
	// and was paid before it was declared dead, each at most C), and a
	// share above C only opposite such a debt.
	c := checker{from: from, totalC: g.totalC, totalB: g.totalB}
	if m.Inc == 0 {
		return c.bad("incarnation 0")
	}
	switch b := m.Body.(type) {
	case *peerv1.GdrlMessage_Probe:
		return c.probe(b.Probe)
	case *peerv1.GdrlMessage_Ask:
		return c.ask(b.Ask)
	case *peerv1.GdrlMessage_Transfer:
		return c.transferTo(g.self, b.Transfer)
	case *peerv1.GdrlMessage_TransferAck:
		if !validID(b.TransferAck.Id) {
			return c.bad("transfer ack without a proper id")
		}
	case *peerv1.GdrlMessage_Record:
		return c.recordMessage(b.Record)
	case *peerv1.GdrlMessage_RecordAck:
	case *peerv1.GdrlMessage_Fenced:
		return c.fenced(b.Fenced)
	case *peerv1.GdrlMessage_FenceAck:
		if b.FenceAck.Inc == 0 {
			return c.bad("fence ack for incarnation 0")
		}
	case *peerv1.GdrlMessage_Hello:
	default:
		return c.bad("no body")
	}
	return nil
}

// ask checks an ask: its default share and its shares.
func (c checker) ask(a *peerv1.GdrlAsk) error {
	if err := c.wide("ask default", a.DefaultCapacity, a.DefaultBurst); err != nil {
		return err
	}
	return c.shares("ask", a.Shares)
}

// transferTo checks a transfer message received by self: the transfer,
// and that a plain (not resolving) one is meant for self.
func (c checker) transferTo(self strategy.NodeID, t *peerv1.GdrlTransfer) error {
	if err := c.transfer("transfer", t); err != nil {
		return err
	}
	if !t.Resolve && strategy.NodeID(t.Id.Dst) != self {
		return c.bad("transfer %v is for %s", idFrom(t.Id), t.Id.Dst)
	}
	return nil
}

// checker holds what validate's checks need: the sender (named in every
// error) and the rule's whole capacity C and burst B (the bounds).
type checker struct {
	from           strategy.NodeID
	totalC, totalB int64
}

func (c checker) bad(format string, args ...any) error {
	return fmt.Errorf("gdrl: message from %s: %s", c.from, fmt.Sprintf(format, args...))
}

// wide checks an amount other than a transfer's: within ±(2C, 2B).
func (c checker) wide(what string, capacity, burst int64) error {
	hiC, hiB := 2*c.totalC, 2*c.totalB
	if capacity < -hiC || capacity > hiC || burst < -hiB || burst > hiB {
		return c.bad("%s amount (%d, %d) outside ±(%d, %d) (twice the rule's capacity and burst)", what, capacity, burst, hiC, hiB)
	}
	return nil
}

// items checks a list of per-key amounts: no key twice; exact (a
// transfer's) within [0, C] x [0, B] with at most the burst in tokens,
// else wide and without tokens.
func (c checker) items(what string, its []*peerv1.GdrlItem, exact bool) error {
	seen := make(map[string]bool, len(its))
	for _, it := range its {
		if seen[it.Key] {
			return c.bad("%s: key %q twice", what, it.Key)
		}
		seen[it.Key] = true
		if exact {
			if it.Capacity < 0 || it.Capacity > c.totalC || it.Burst < 0 || it.Burst > c.totalB {
				return c.bad("%s: key %q amount (%d, %d) outside [0, %d] x [0, %d]", what, it.Key, it.Capacity, it.Burst, c.totalC, c.totalB)
			}
			if it.Tokens < 0 || it.Tokens > it.Burst {
				return c.bad("%s: key %q carries %d tokens with a burst of %d", what, it.Key, it.Tokens, it.Burst)
			}
		} else if err := c.wide(what, it.Capacity, it.Burst); err != nil {
			return err
		} else if it.Tokens != 0 {
			return c.bad("%s: key %q carries tokens", what, it.Key)
		}
	}
	return nil
}

func (c checker) transfer(what string, t *peerv1.GdrlTransfer) error {
	if t == nil || !validID(t.Id) {
		return c.bad("%s without a proper id (payer, destination, number)", what)
	}
	return c.items(what, t.Items, true)
}

func (c checker) transfers(what string, ts []*peerv1.GdrlTransfer) error {
	for _, t := range ts {
		if err := c.transfer(what, t); err != nil {
			return err
		}
	}
	return nil
}

// absorbed checks the give-ups of inheritances a later heir made on an
// incarnation's behalf.
func (c checker) absorbed(what string, as []*peerv1.GdrlAbsorbed) error {
	for _, a := range as {
		if a.Version == 0 || a.By == "" || a.ByInc == 0 {
			return c.bad("%s: give-up of an inheritance without a version or a giver", what)
		}
		if a.CreditsOnly && (a.DefaultCapacity != 0 || a.DefaultBurst != 0 || len(a.Items) != 0) {
			return c.bad("%s: credits-only give-up with amounts", what)
		}
		if err := c.wide(what+" give-up", a.DefaultCapacity, a.DefaultBurst); err != nil {
			return err
		}
		if err := c.items(what+" give-up", a.Items, false); err != nil {
			return err
		}
		if err := c.transfers(what+" give-up", slices.Concat(a.GivenUp, a.Passed)); err != nil {
			return err
		}
	}
	return nil
}

func (c checker) applied(what string, as []*peerv1.GdrlApplied) error {
	for _, a := range as {
		if a.Src == "" || a.SrcInc == 0 {
			return c.bad("%s: duplicate filter entry without a payer", what)
		}
	}
	return nil
}

// shares checks shares: no key twice, amounts wide, demand, noise and
// recent count finite and within [0, 1e30].
func (c checker) shares(what string, ss []*peerv1.GdrlShare) error {
	seen := make(map[string]bool, len(ss))
	for _, s := range ss {
		if seen[s.Key] {
			return c.bad("%s: key %q twice", what, s.Key)
		}
		seen[s.Key] = true
		if err := c.wide(what, s.Capacity, s.Burst); err != nil {
			return err
		}
		for _, d := range []float32{s.Demand, s.Noise, s.Recent} {
			if x := float64(d); math.IsNaN(x) || math.IsInf(x, 0) || x < 0 || x > 1e30 {
				return c.bad("%s: key %q demand %v ± %v", what, s.Key, s.Demand, s.Noise)
			}
		}
		if x := float64(s.Indicator); math.IsNaN(x) || x < 0 || x > 1 {
			return c.bad("%s: key %q indicator %v outside [0, 1]", what, s.Key, s.Indicator)
		}
	}
	return nil
}

func (c checker) record(what string, r *peerv1.GdrlRecord) error {
	if r.Version == 0 || r.Base >= r.Version {
		return c.bad("%s base %d, version %d", what, r.Base, r.Version)
	}
	if err := c.wide(what+" default", r.DefaultCapacity, r.DefaultBurst); err != nil {
		return err
	}
	if err := c.shares(what, r.Shares); err != nil {
		return err
	}
	if err := c.transfers(what+" outbox", r.Outbox); err != nil {
		return err
	}
	if err := c.applied(what, r.Applied); err != nil {
		return err
	}
	if slices.Contains(r.GivenUp, 0) {
		return c.bad("%s: an inheritance given up at version 0", what)
	}
	for _, tb := range slices.Concat(r.Tombstones, r.Retired, r.Draining) {
		if err := c.tombstone(tb); err != nil {
			return err
		}
	}
	return nil
}

// recordMessage checks a record sent on its own: the record, and the
// records it names as held.
func (c checker) recordMessage(r *peerv1.GdrlRecord) error {
	if err := c.record("record", r); err != nil {
		return err
	}
	for _, h := range r.Held {
		if h.Node == "" || h.Inc == 0 || h.Version == 0 {
			return c.bad("held record without a node, an incarnation or a version")
		}
	}
	return nil
}

func (c checker) tombstone(tb *peerv1.GdrlTombstone) error {
	if tb.Node == "" || tb.Inc == 0 {
		return c.bad("tombstone without a node")
	}
	if err := c.wide("tombstone default", tb.DefaultCapacity, tb.DefaultBurst); err != nil {
		return err
	}
	if err := c.items("tombstone", tb.Items, false); err != nil {
		return err
	}
	if err := c.applied("tombstone", tb.Applied); err != nil {
		return err
	}
	if err := c.transfers("tombstone", tb.OnBehalf); err != nil {
		return err
	}
	if err := c.absorbed("tombstone", tb.Absorbed); err != nil {
		return err
	}
	if slices.Contains(tb.GivenUp, 0) {
		return c.bad("tombstone: an inheritance given up at version 0")
	}
	if tb.Lost && (tb.DefaultCapacity != 0 || tb.DefaultBurst != 0 || len(tb.Items) != 0 || len(tb.OnBehalf) != 0) {
		return c.bad("lost tombstone of %s with amounts or credits", tb.Node)
	}
	return nil
}

func (c checker) probe(p *peerv1.GdrlProbe) error {
	if err := c.wide("probe default", p.DefaultCapacity, p.DefaultBurst); err != nil {
		return err
	}
	if err := c.shares("probe", p.Shares); err != nil {
		return err
	}
	seen := make(map[string]bool, len(p.Shares)+len(p.Empty))
	for _, s := range p.Shares {
		seen[s.Key] = true
	}
	for _, k := range p.Empty {
		if seen[k] {
			return c.bad("probe: key %q twice", k)
		}
		seen[k] = true
	}
	return nil
}

func (c checker) fenced(f *peerv1.GdrlFenced) error {
	if f.Inc == 0 {
		return c.bad("fence for incarnation 0")
	}
	// A tombstone is taken at the version of a record, never 0 (records
	// at version 0 are refused): a fence at version 0 was given up as
	// such and listed in the node's records (GdrlRecord.given_up), which
	// every buddy then refused, so that the node lost its replica (found
	// by TestGarbageAndReadOnlyCallsChangeNothing: a mutated frame).
	if f.Version == 0 {
		return c.bad("fence of version 0")
	}
	if err := c.wide("fence default", f.DefaultCapacity, f.DefaultBurst); err != nil {
		return err
	}
	if err := c.items("fence", f.Items, false); err != nil {
		return err
	}
	if err := c.transfers("fence", f.OnBehalf); err != nil {
		return err
	}
	return c.absorbed("fence", f.Absorbed)
}

func validID(id *peerv1.GdrlTransferId) bool {
	return id != nil && id.Src != "" && id.SrcInc != 0 && id.Dst != "" && id.DstInc != 0 && id.Seq != 0
}
