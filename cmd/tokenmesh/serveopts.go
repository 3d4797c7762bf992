package main

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tokenmesh/tokenmesh/config"
)

// Environment variables serve reads. A flag given on the command line wins
// over its variable, the variable over the YAML file, the file over the
// built-in default.
const (
	envConfig     = "TOKENMESH_CONFIG"
	envLogFormat  = "TOKENMESH_LOG_FORMAT"
	envLogLevel   = "TOKENMESH_LOG_LEVEL"
	envName       = "TOKENMESH_NAME"
	envAPIAddr    = "TOKENMESH_API_ADDR"
	envGRPCAddr   = "TOKENMESH_GRPC_ADDR"
	envPeerAddr   = "TOKENMESH_PEER_ADDR"
	envGossipAddr = "TOKENMESH_GOSSIP_ADDR"
	envJoin       = "TOKENMESH_JOIN"
	envLatency    = "TOKENMESH_LATENCY_HINT"
	envShadow     = "TOKENMESH_ENVOY_SHADOW_MODE"
	envEnvoyStrat = "TOKENMESH_ENVOY_STRATEGY"
)

// nodeFlags are serve's flags for the common node settings, over the YAML.
type nodeFlags struct {
	name, apiAddr, grpcAddr, peerAddr, gossipAddr string
	join                                          []string
	logFormat, logLevel                           string
	latencyHint                                   string
	envoyShadowMode                               bool
	envoyStrategy                                 string
}

// add defines the flags on cmd.
func (o *nodeFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&o.name, "name", "", "node name, unique in the cluster (env "+envName+"; over node.name)")
	fl.StringVar(&o.apiAddr, "api-addr", "", "HTTP/JSON API address host:port (env "+envAPIAddr+"; over node.api_addr)")
	fl.StringVar(&o.grpcAddr, "grpc-addr", "", "gRPC API address host:port (env "+envGRPCAddr+"; over node.grpc_addr)")
	fl.StringVar(&o.peerAddr, "peer-addr", "", "peer gRPC address host:port, published to the other members: must be reachable by them (env "+envPeerAddr+"; over node.peer_addr)")
	fl.StringVar(&o.gossipAddr, "gossip-addr", "", "gossip (membership) address host:port (env "+envGossipAddr+"; over node.gossip_addr)")
	fl.StringSliceVar(&o.join, "join", nil, "gossip address host:port of another member; repeat the flag or give a comma list (env "+envJoin+", a comma list; over node.join)")
	fl.StringVar(&o.latencyHint, "latency-hint", "", "one-way peer latency the strategies derive their timers from (owner's hold, ...): a duration such as 2ms (default 0s) or auto (measured from gossip probes) (env "+envLatency+"; over node.latency_hint)")
	fl.BoolVar(&o.envoyShadowMode, "envoy-shadow-mode", false, "Envoy RLS global shadow mode, as envoyproxy/ratelimit's SHADOW_MODE: every check decided and counted, none refused (env "+envShadow+": true or false; over node.envoy_shadow_mode)")
	fl.StringVar(&o.envoyStrategy, "envoy-strategy", "", "the strategy of --envoy-config's limits whose file names none (tokenmesh: {strategy: ...}); quota serves Envoy's RLQS from envoyproxy/ratelimit's files as they are (docs/RLQS.md); default owner (env "+envEnvoyStrat+"; over node.envoy_strategy)")
	fl.StringVar(&o.logFormat, "log-format", "text", "log format: text (key=value lines) or json (one object a line) (env "+envLogFormat+")")
	fl.StringVar(&o.logLevel, "log-level", "info", "least severe log level written: debug, info, warn or error (env "+envLogLevel+")")
}

// setting is where a value came from: "--name", "TOKENMESH_NAME".
type setting struct {
	value  string
	source string
}

// pick returns the flag's value when it was given on the command line, else
// the environment variable's when set and not empty; ok false: neither
// (the YAML or the default stands).
func pick(cmd *cobra.Command, flag, flagValue, env string) (setting, bool) {
	if cmd.Flags().Changed(flag) {
		return setting{flagValue, "--" + flag}, true
	}
	if v, ok := os.LookupEnv(env); ok && v != "" {
		return setting{v, env}, true
	}
	return setting{}, false
}

// resolvedConfigPath is --config, else TOKENMESH_CONFIG ("" for neither).
func (o *serveOptions) resolvedConfigPath(cmd *cobra.Command) string {
	if s, ok := pick(cmd, "config", o.configPath, envConfig); ok {
		return s.value
	}
	return ""
}

// apply sets the node settings given by flags or environment variables on
// f, each then checked with f.Validate: an error names the flag or the
// variable and the value. It returns what it set ("node.name from --name")
// for the log, and whether a peer setting (peer or gossip address, join
// list) was given.
func (o *nodeFlags) apply(cmd *cobra.Command, f *config.File) (applied []string, peerSet bool, err error) {
	type override struct {
		flag, value, env, field string
		peer                    bool
		set                     func(string)
	}
	n := &f.Node
	joinFlag := strings.Join(o.join, ",")
	var setErr error // a value that does not parse
	for _, x := range []override{
		{"name", o.name, envName, "node.name", false, func(v string) { n.Name = v }},
		{"api-addr", o.apiAddr, envAPIAddr, "node.api_addr", false, func(v string) { n.APIAddr = v }},
		{"grpc-addr", o.grpcAddr, envGRPCAddr, "node.grpc_addr", false, func(v string) { n.GRPCAddr = v }},
		{"peer-addr", o.peerAddr, envPeerAddr, "node.peer_addr", true, func(v string) { n.PeerAddr = v }},
		{"gossip-addr", o.gossipAddr, envGossipAddr, "node.gossip_addr", true, func(v string) { n.GossipAddr = v }},
		{"join", joinFlag, envJoin, "node.join", true, func(v string) {
			n.Join = nil
			for _, a := range strings.Split(v, ",") {
				if a = strings.TrimSpace(a); a != "" {
					n.Join = append(n.Join, a)
				}
			}
		}},
		{"latency-hint", o.latencyHint, envLatency, "node.latency_hint", false, func(v string) {
			n.LatencyHint, setErr = config.ParseLatencyHint(v)
		}},
		{"envoy-strategy", o.envoyStrategy, envEnvoyStrat, "node.envoy_strategy", false, func(v string) { n.EnvoyStrategy = v }},
		{"envoy-shadow-mode", strconv.FormatBool(o.envoyShadowMode), envShadow, "node.envoy_shadow_mode", false, func(v string) {
			var err error
			if n.EnvoyShadowMode, err = strconv.ParseBool(v); err != nil {
				setErr = errors.New("want true or false")
			}
		}},
	} {
		s, ok := pick(cmd, x.flag, x.value, x.env)
		if !ok {
			continue
		}
		old := *n
		x.set(s.value)
		if setErr != nil {
			*n = old
			return nil, false, usageErr("%s %q: %s: %v", s.source, s.value, x.field, setErr)
		}
		if verr := f.Validate(); verr != nil {
			*n = old
			return nil, false, usageErr("%s %q: %v", s.source, s.value, verr)
		}
		applied = append(applied, x.field+" from "+s.source)
		peerSet = peerSet || x.peer
	}
	return applied, peerSet, nil
}

// newLogger builds serve's one logger on w from --log-format and
// --log-level (or their environment variables); errors name the flag or
// variable that holds the bad value.
func (o *nodeFlags) newLogger(cmd *cobra.Command, w io.Writer) (*slog.Logger, string, error) {
	format := "text"
	if s, ok := pick(cmd, "log-format", o.logFormat, envLogFormat); ok {
		switch s.value {
		case "text", "json":
			format = s.value
		default:
			return nil, "", usageErr("%s %q: want text or json", s.source, s.value)
		}
	}
	level := slog.LevelInfo
	if s, ok := pick(cmd, "log-level", o.logLevel, envLogLevel); ok {
		if err := level.UnmarshalText([]byte(s.value)); err != nil {
			return nil, "", usageErr("%s %q: want debug, info, warn or error", s.source, s.value)
		}
	}
	hopts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, hopts)), format, nil
	}
	return slog.New(slog.NewTextHandler(w, hopts)), format, nil
}

// shadowNote is what serve's banner adds to its Envoy RLS line for n's
// global shadow mode ("" when off).
func shadowNote(n config.Node) string {
	if n.EnvoyShadowMode {
		return "; global shadow mode (node.envoy_shadow_mode): decided and counted, none refused"
	}
	return ""
}

// serveEnvHelp is the part of serve --help on flags and environment.
const serveEnvHelp = `Flags and environment: the common node settings can be given without YAML,
as flags or environment variables (each flag below names its variable; an
empty variable counts as unset); the precedence is flag > environment > YAML
file (--config) > built-in default. A peer setting (--peer-addr,
--gossip-addr or --join) makes the node networked even without --config. A
bad value stops the start with an error naming the flag or variable.
docs/OPERATIONS.md, "Flags and environment variables", has the table.`
