// Package proxy runs a fleet of emulated Envoys against RLQS servers, for
// tests and benchmarks: each one holds a
// envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas
// stream to a server, decides the requests offered to it with an
// envoymodel.Proxy (so the emulator and the simulator decide with the same
// code), reports usage on the model's timer, applies the assignments it
// receives, and fails over to the next server address when its stream's
// server dies. It records every decision (with the time the model took),
// report, response, assignment and stream event, with the messages'
// protobuf sizes (Record), so that tests can hold the fleet's admissions to
// b + r*T per window (Record.Workload with eval.EnvelopeViolation) and
// watch shares follow demand (Record.Admitted).
//
// Time is the wall clock (since Start, monotonic); each proxy calls its
// model from one goroutine, at the time it handles each event (a request
// due, the report timer, a response), and sends from another, so a slow or
// dead server never delays decisions.
//
// What is Envoy's (global_client_impl.cc): the stream opens with the first
// bucket and carries its initial report; it is reopened only when the
// report timer fires after it broke or failed to open (onSendReportsTimer),
// so the delay between attempts is the report interval; reports built
// while it is down are dropped with their counts; assignments survive a
// broken stream until their TTL (the model's StreamReset). What is ours:
// which server a new stream goes to (the next address in Config.Addrs; in
// Envoy the RLQS cluster's load balancer picks a host), the bound on each
// attempt (Config.ConnectTimeout) and on gRPC's reconnect backoff
// (Config.MaxBackoff), the client id each proxy may send on every stream
// (Config.ClientIDs: the tokenmesh-client-id header, which an Envoy sends
// when its grpc_service.initial_metadata sets it), and the offered load (Load: Poisson or uniform
// arrivals on one bucket or drawn uniformly from several, bounded in count
// and time, so a fleet stops by itself: Wait).
package proxy
