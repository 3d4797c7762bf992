package daemon

import (
	"context"

	"google.golang.org/grpc"

	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/envoyrls"
	"github.com/tokenmesh/tokenmesh/rule"
)

// Service is a gRPC service served on the daemon's gRPC server beside its
// own (Config.Services; the package documentation says when each method
// is called and what a service may take from the Daemon).
type Service interface {
	// Name names the service in logs and errors ("rlqs").
	Name() string
	// Register registers the service's handlers on g, once, in Start,
	// before g serves. An error stops Start, wrapped as
	// "service NAME: ...".
	Register(g *grpc.Server, d *Daemon) error
	// Reloaded is told what a Reload put in force, after the node applied
	// it. An error is logged and returned by Reload (the node keeps the
	// new rules).
	Reloaded(ctx context.Context, rs RuleSet) error
	// Shutdown ends what the service runs (its streams above all) before
	// the servers stop and the node drains; ctx is Daemon.Shutdown's. An
	// error is logged and returned by Daemon.Shutdown, which carries on.
	Shutdown(ctx context.Context) error
}

// RuleSet is the configuration a daemon's node runs: at Start, and after
// each Reload that applied.
type RuleSet struct {
	// File is the config the rules came from: Config.File at Start, the
	// file as read again by a Reload (its node section is not applied).
	File *config.File
	// Rules is every rule of the node: File's, then the Envoy config's.
	Rules []rule.Rule
	// Envoy is the Envoy rate limit config (envoyproxy/ratelimit YAML);
	// nil without one. Read at Start, and again by each Reload.
	Envoy *envoyrls.Config
	// EnvoyDir is the directory Envoy was read from ("" without one):
	// Start's, the same for every Reload.
	EnvoyDir string
}

// ServiceFuncs is a Service made of functions; a nil function does
// nothing (returns nil).
type ServiceFuncs struct {
	ServiceName  string
	RegisterFunc func(g *grpc.Server, d *Daemon) error
	ReloadedFunc func(ctx context.Context, rs RuleSet) error
	ShutdownFunc func(ctx context.Context) error
}

// Name is s.ServiceName.
func (s ServiceFuncs) Name() string { return s.ServiceName }

// Register calls s.RegisterFunc.
func (s ServiceFuncs) Register(g *grpc.Server, d *Daemon) error {
	if s.RegisterFunc == nil {
		return nil
	}
	return s.RegisterFunc(g, d)
}

// Reloaded calls s.ReloadedFunc.
func (s ServiceFuncs) Reloaded(ctx context.Context, rs RuleSet) error {
	if s.ReloadedFunc == nil {
		return nil
	}
	return s.ReloadedFunc(ctx, rs)
}

// Shutdown calls s.ShutdownFunc.
func (s ServiceFuncs) Shutdown(ctx context.Context) error {
	if s.ShutdownFunc == nil {
		return nil
	}
	return s.ShutdownFunc(ctx)
}
