package regionlease

import "github.com/tokenmesh/tokenmesh/strategy/internal/leasepool"

// pool is a granter's bucket of one key with the tokens it has leased out
// counted against its capacity (leasepool, shared with lease; Inherited is
// always 0 here: regionlease has no replicas).
type pool = leasepool.Pool

// shape is the rate and burst every pool of a node shares.
type shape = leasepool.Shape
