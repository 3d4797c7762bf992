package proxy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc"

	"github.com/tokenmesh/tokenmesh/rlqs/envoymodel"
)

// Arrivals is how a Load spaces its requests.
type Arrivals uint8

const (
	// Poisson: independent exponential gaps of mean 1/Rate (the first one
	// after Start too).
	Poisson Arrivals = iota
	// Uniform: one request every 1/Rate, the first at Start.
	Uniform
)

func (a Arrivals) String() string {
	switch a {
	case Poisson:
		return "poisson"
	case Uniform:
		return "uniform"
	}
	return fmt.Sprintf("Arrivals(%d)", uint8(a))
}

// Load is offered load: requests matched into one bucket of one proxy (or
// each into one of Buckets), at Rate requests per second from Start (after
// the fleet starts), until Count requests were offered or Duration has
// passed since Start, whichever comes first (at least one of the two must
// be set, so that the load stops by itself).
type Load struct {
	Proxy  int // index of the proxy, in [0, Config.Proxies)
	Bucket envoymodel.BucketID
	// Buckets, when not empty, replaces Bucket: each request's bucket is
	// drawn uniformly from them (from the load's seeded random stream, as
	// its Poisson gaps).
	Buckets  []envoymodel.BucketID
	Rate     float64 // requests per second, > 0
	Arrivals Arrivals
	Start    time.Duration // >= 0
	Count    int           // >= 0; 0: no count bound
	Duration time.Duration // >= 0; 0: no time bound
}

// Config is a fleet of emulated Envoys.
type Config struct {
	// Proxies is the number of emulated Envoys, >= 1.
	Proxies int
	// Addrs are the RLQS servers' addresses (host:port, or any gRPC target),
	// at least one. A proxy's stream goes to one of them and moves to the
	// next one in the list (wrapping around) when its stream breaks or
	// cannot be opened.
	Addrs []string
	// Spread starts proxy i at Addrs[i mod len(Addrs)], like a cluster load
	// balancer spreading Envoys over servers; otherwise every proxy starts
	// at Addrs[0] and the others are its failovers.
	Spread bool
	// Model is every proxy's rate_limit_quota filter (domain, bucket
	// settings, report interval: 0 is today's Envoy, 5 s).
	Model envoymodel.Config
	// Loads is the offered load.
	Loads []Load
	// Seed seeds the Poisson arrivals (each Load draws from its own stream).
	Seed uint64
	// TLS, when set, dials the servers over TLS with this configuration;
	// nil dials in plaintext (loopback tests).
	TLS *tls.Config
	// DialOptions are added to the fleet's own (credentials, the bounded
	// reconnect backoff).
	DialOptions []grpc.DialOption
	// ConnectTimeout bounds each attempt to open a stream (the connection
	// must be ready within it); 0 means 1 s.
	ConnectTimeout time.Duration
	// MaxBackoff bounds gRPC's reconnect backoff on a connection whose
	// server went away (it starts at a tenth of it); 0 means 1 s.
	MaxBackoff time.Duration
	// ClientIDs, when set, makes proxy i send ClientID(i) in the
	// tokenmesh-client-id header (quotamsg.ClientIDHeader) of every stream
	// it opens, as an Envoy does whose grpc_service.initial_metadata sets
	// it: the server then treats its next stream, after a failover, as the
	// same client (strategy/quota # Client ids).
	ClientIDs bool
}

// ClientID is proxy i's client id when Config.ClientIDs is set.
func ClientID(i int) string { return fmt.Sprintf("envoy-%d", i) }

// validate checks the fleet's settings (checkFleet), then each load
// (Load.validate); the error names the first bad field.
func (cfg *Config) validate() error {
	if err := cfg.checkFleet(); err != nil {
		return err
	}
	for i, l := range cfg.Loads {
		if err := l.validate(cfg.Proxies); err != nil {
			return fmt.Errorf("proxy: Config.Loads[%d]: %w", i, err)
		}
	}
	return nil
}

// checkFleet checks Proxies (at least 1), Addrs (at least one, none
// empty), ConnectTimeout and MaxBackoff (not negative).
func (cfg *Config) checkFleet() error {
	switch {
	case cfg.Proxies < 1:
		return fmt.Errorf("proxy: Config.Proxies %d, want >= 1", cfg.Proxies)
	case len(cfg.Addrs) == 0:
		return errors.New("proxy: Config.Addrs is empty, want at least one RLQS server")
	case cfg.ConnectTimeout < 0:
		return fmt.Errorf("proxy: Config.ConnectTimeout %v is negative", cfg.ConnectTimeout)
	case cfg.MaxBackoff < 0:
		return fmt.Errorf("proxy: Config.MaxBackoff %v is negative", cfg.MaxBackoff)
	}
	for i, a := range cfg.Addrs {
		if a == "" {
			return fmt.Errorf("proxy: Config.Addrs[%d] is empty", i)
		}
	}
	return nil
}

// validate checks a load of a fleet of proxies proxies: its proxy in
// range, a positive finite Rate (requests per second), a known Arrivals,
// Start, Count and Duration not negative and one of Count and Duration
// set. The error names the field, without the load's index.
func (l Load) validate(proxies int) error {
	switch {
	case l.Proxy < 0 || l.Proxy >= proxies:
		return fmt.Errorf("Proxy %d not in [0, %d)", l.Proxy, proxies)
	case !(l.Rate > 0) || math.IsInf(l.Rate, 1):
		return fmt.Errorf("Rate %v, want a positive finite number of requests per second", l.Rate)
	case l.Arrivals > Uniform:
		return fmt.Errorf("Arrivals %v unknown", l.Arrivals)
	case l.Start < 0 || l.Count < 0 || l.Duration < 0:
		return fmt.Errorf("negative Start %v, Count %d or Duration %v", l.Start, l.Count, l.Duration)
	case l.Count == 0 && l.Duration == 0:
		return errors.New("neither Count nor Duration set: the load would never stop")
	}
	return nil
}
