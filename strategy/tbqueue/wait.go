package tbqueue

// WaitRefusal says why tbqueue has no waiting mode (strategy.WaitRefuser;
// SRTM §5.2): its bucket is a queue of (time-of-birth, time-of-death)
// elements that every node appends from its own view and merges like merge
// sort (002 ch. 4). Reserving would mean elements for tokens not yet
// refilled, which nodes would append at once from views a gossip interval
// old, so up to N x r x max_wait tokens beyond the envelope. The drivers
// decide a check with a max wait as a plain one.
func (q *TBQueue) WaitRefusal() string {
	return "its queue of (time-of-birth, time-of-death) elements is appended to by every node from its own view and merged like merge sort (002 ch. 4): a wait is an element for a token not yet refilled, which every node could append at once from a stale view, so up to N x r x max_wait tokens beyond the envelope; there is no single bucket to reserve in"
}
