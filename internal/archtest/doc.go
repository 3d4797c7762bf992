// Package archtest holds the tests of the architecture's rules
// (docs/ARCHITECTURE.md) that no single package can check about itself:
//
//   - layering: nothing under strategy/ imports a driver, no strategy
//     imports another, the state machines (strategy/..., bucket,
//     rendezvous, rlqs/envoymodel) read no clock and start no goroutine,
//     the live runtime links no simulator, and every import points down
//     the package map of docs/ARCHITECTURE.md;
//   - the metrics catalogue: the metrics a running node registers are the
//     ones docs/API.md's tables and server/metrics.go's list name;
//   - docs/OPERATIONS.md's list of the strategies that snapshot is the
//     registry's (strategy/registry, Info.Snapshots).
//
// The package has no code besides its tests; `go test ./internal/archtest`
// runs them (make test does).
package archtest
