package gcounter

// WaitRefusal says why gcounter has no waiting mode (strategy.WaitRefuser;
// SRTM §5.2): its bucket is a G-Counter of consumed tokens that every node
// spends from its own view and merges by max (002 ch. 3). A reservation
// would be consumption counted ahead against refill that up to N nodes
// promise at once from views a gossip interval old, so the over-admission
// drop mode keeps within a gossip interval's refill would grow to N x
// r x max_wait. The drivers decide a check with a max wait as a plain one.
func (g *GCounter) WaitRefusal() string {
	return "its G-Counter of consumed tokens is spent by every node from its own view and merged by max (002 ch. 3): a wait is a promise of future refill that every node could make at once from a stale view, so up to N x r x max_wait tokens beyond the envelope; there is no single bucket to reserve in"
}
