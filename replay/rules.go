package replay

import "fmt"

// checkEvents checks events, in time order, against a target of n nodes
// that can (canFault) or cannot inject faults and can (canRestart) or
// cannot restart a node: one rule per event kind (checkKill,
// checkRestart), and every node a partition names exists.
func checkEvents(events []Event, n int, canFault, canRestart bool) error {
	killed := map[int]bool{}
	for _, e := range events {
		if err := checkEvent(e, n, canFault, canRestart, killed); err != nil {
			return err
		}
	}
	return nil
}

// checkEvent checks one event; killed is which nodes are down before it,
// updated for it.
func checkEvent(e Event, n int, canFault, canRestart bool, killed map[int]bool) error {
	if !canFault {
		return fmt.Errorf("replay: %v: the target cannot inject faults", e)
	}
	var err error
	switch e.Kind {
	case Kill:
		err = checkKill(e, n, killed)
	case Restart:
		err = checkRestart(e, n, canRestart, killed)
	}
	if err != nil {
		return err
	}
	return checkGroups(e, n)
}

// checkNode checks that e's node is one of the n nodes.
func checkNode(e Event, n int) error {
	if e.Node < 0 || e.Node >= n {
		return fmt.Errorf("replay: %v: no node %d (nodes 0..%d)", e, e.Node, n-1)
	}
	return nil
}

// checkKill checks a Kill: its node exists and is up; it marks it killed.
func checkKill(e Event, n int, killed map[int]bool) error {
	if err := checkNode(e, n); err != nil {
		return err
	}
	if killed[e.Node] {
		return fmt.Errorf("replay: %v: node %d is killed twice (without a restart between)", e, e.Node)
	}
	killed[e.Node] = true
	return nil
}

// checkRestart checks a Restart: its node exists and is down and the
// target can restart it; it marks it up.
func checkRestart(e Event, n int, canRestart bool, killed map[int]bool) error {
	if err := checkNode(e, n); err != nil {
		return err
	}
	switch {
	case !canRestart:
		return fmt.Errorf("replay: %v: the target cannot restart a node", e)
	case !killed[e.Node]:
		return fmt.Errorf("replay: %v: node %d is not down at that time (restart only a killed node)", e, e.Node)
	}
	killed[e.Node] = false
	return nil
}

// checkGroups checks that every node of e's partition groups exists.
func checkGroups(e Event, n int) error {
	for _, g := range e.Groups {
		for _, x := range g {
			if x < 0 || x >= n {
				return fmt.Errorf("replay: %v: no node %d (nodes 0..%d)", e, x, n-1)
			}
		}
	}
	return nil
}
