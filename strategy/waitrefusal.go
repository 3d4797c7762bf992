package strategy

import "fmt"

// WaitRefuser is implemented by strategies that do not implement waiting
// mode (Waiter; SRTM §5.2) for a reason of their design, which
// WaitRefusal states in a line: gcounter and tbqueue, whose state is
// replicated to every node and spent concurrently by all of them, so no
// node can promise a wait. Ours.
type WaitRefuser interface {
	WaitRefusal() string
}

// CheckWait is nil when s implements waiting mode (Waiter), and otherwise
// an error naming the strategy and why not, e.g. "gcounter does not
// implement waiting mode (...)": for a driver that refuses a max wait the
// strategy would ignore (the simulator's --max-wait with the strategy
// named; SRTM §5.2). A strategy with no stated reason (regionlease) is
// refused as "not implemented for it".
func CheckWait(name string, s Strategy) error {
	if _, ok := s.(Waiter); ok {
		return nil
	}
	why := "not implemented for it"
	if r, ok := s.(WaitRefuser); ok {
		why = r.WaitRefusal()
	}
	return fmt.Errorf("%s does not implement waiting mode (%s); it decides a check with a max wait as a plain one (docs/EVALUATION.md, \"Waiting mode\")", name, why)
}
