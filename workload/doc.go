// Package workload provides the requests that drive the simulator and the policy that
// assigns each request to a cluster node.
//
// A workload is a [Trace]: requests sorted by arrival time. Traces come from files
// ([ReadFile], [Read]: CSV "ts_ms,key[,tokens]" or Common/Combined Log Format access
// logs, plain or gzip) or from the built-in generators ([ParseGenerator], [Default]).
// An [Assigner] ([NewAssigner]) then picks the node that receives each request.
//
// Everything is deterministic: the same input (file bytes, or generator spec and seed)
// gives the same Trace, and the same policy, seed and request sequence give the same
// node assignment. All times are [time.Duration] offsets from the start of the trace in
// whole milliseconds.
package workload
