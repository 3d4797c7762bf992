package limiter

import "context"

// Ready reports whether the node decides as the cluster would: every
// rule's strategy that needs a moment after start is ready (gdrl: a node
// that joined holds its default share; cluster.Node.Ready). Errors:
// ctx.Err(), cluster.ErrClosed.
func (n *Node) Ready(ctx context.Context) (bool, error) { return n.node.Ready(ctx) }

// WaitReady returns nil once the node is Ready (cluster.Node.WaitReady,
// asking every cluster.ReadyPoll). A server in front of the node should
// report not ready until then: a check decided before may be refused for
// lack of a share the cluster is about to give. Errors: ctx.Err() when
// ctx ends first, cluster.ErrClosed.
func (n *Node) WaitReady(ctx context.Context) error { return n.node.WaitReady(ctx) }
