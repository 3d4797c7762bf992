// Package rule is tokenmesh's one rule type: a limit the cluster enforces
// per key, a token bucket of Rate and Burst coordinated by a named
// strategy. The YAML configuration (package config) parses into it, the
// node (cluster.Config.Rules) runs it, the embeddable library
// (limiter.Config.Rules) takes it, and localcluster writes it into the
// node configuration files it generates (through config.Marshal).
//
// The package is a leaf above the strategies: it imports bucket, strategy
// and strategy/registry (to check a rule's strategy and parameters against
// their declarations), nothing of the runtime, so config need not import
// cluster to hold a rule. The shape is ours; the token bucket (rate r,
// burst b) is the seeds' (SRTM §2).
package rule

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
)

// Defaults of a rule's optional fields.
const (
	// DefaultStrategy is the strategy of a rule that names none: owner is
	// exact (every key has one bucket, at its rendezvous owner, so the
	// cluster admits what one central bucket would), at the cost of one
	// forward hop for requests that reach a non-owner.
	DefaultStrategy = "owner"
	// DefaultKey is the key template of a rule that gives none: the key the
	// client passes with the rule name in its request.
	DefaultKey = "{key}"
	// MaxNameBytes bounds a rule name (it travels in every peer frame).
	MaxNameBytes = 128
)

// Rule is one limit the cluster enforces per key: a token bucket (Rate,
// Burst) coordinated by the named strategy.
type Rule struct {
	// Name identifies the rule in requests, metrics and peer frames:
	// letters, digits, '_', '-', '.', at most MaxNameBytes bytes; unique
	// per node.
	Name string
	// Key documents how a request maps to a key: a template of literal
	// text and placeholders, "{key}" (the key the client passes; "" means
	// DefaultKey), "{tenant}", "{header:x-api-key}"... The API carries
	// (rule, key), so the client forms the key; Key says how (the node
	// does not read it, nor does Validate: config checks it with
	// httplimit/keytemplate, which imports cluster).
	Key string
	// Rate is the refill: Rate.Tokens tokens per Rate.Per, exact (see
	// ParseRate, MustRate).
	Rate bucket.Rate
	// Burst is the bucket's capacity in tokens, >= 1 (config and
	// localcluster default it to DefaultBurst(Rate)).
	Burst int64
	// Strategy is a name from strategy/registry ("": DefaultStrategy where a
	// rule is read from a file or built by limiter).
	Strategy string
	// Params are the strategy's parameters as "name=value" strings,
	// unprefixed ("hold=2ms"), one or several pairs per item (see
	// strategy.ParseParams); the names and types are the strategy's
	// declarations (strategy.ParamSpec). Pairs(map) builds them from a
	// map, sorted.
	Params []string
	// Partition is the rule's split-brain rule (strategy.Config.Partition;
	// the zero value is available). A "partition=available|conserve"
	// entry in Params (the generic strategy.PartitionParam) sets it too;
	// the two must agree. PartitionConserve needs a strategy that
	// implements strategy.Conserver.
	Partition strategy.PartitionMode
}

// Pairs returns m as sorted "name=value" strings (nil for an empty map),
// the form of Rule.Params.
func Pairs(m map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+"="+m[k])
	}
	return out
}

// FieldError is an error of one field of a rule: Field is the field's
// YAML name ("rate", "burst", "strategy", "params", "params.hold",
// "partition"), Param the parameter it concerns when there is one ("hold"),
// Msg what is wrong. Validate returns it so that config can point at the
// line of the field.
type FieldError struct {
	Field, Param, Msg string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// CheckName checks a rule (or node) name: not empty, at most MaxNameBytes
// bytes of letters, digits, '_', '-' and '.'. Errors quote the name.
func CheckName(s string) error {
	if s == "" {
		return fmt.Errorf("is empty")
	}
	if len(s) > MaxNameBytes {
		return fmt.Errorf("%q is longer than %d bytes", s, MaxNameBytes)
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("%q has %q (use letters, digits, '_', '-', '.')", s, c)
		}
	}
	return nil
}

// CheckParamName checks the name of a strategy parameter as Rule.Params
// carries it ("name=value" pairs that strategy.ParseParams splits): not
// empty, without '=', ',', '.' or spaces. Errors quote the name. Whether
// the strategy declares the name is Validate's to check.
func CheckParamName(k string) error {
	if k == "" || strings.ContainsAny(k, "=,. \t\n\r") {
		return fmt.Errorf("%q is not a parameter name (no '=', ',', '.' or spaces)", k)
	}
	return nil
}

// Validate checks r as a node will run it, with the error of the first
// bad field as a *FieldError: the name (CheckName), rate > 0 and valid, burst >= 1 and
// representable at the rate, a known strategy ("" is DefaultStrategy),
// parameter names and types against the strategy's declarations, a
// partition that agrees with any partition parameter and that the
// strategy supports, and finally a throwaway instance of the strategy
// that rejects values out of their bounds (a negative timeout, lease's
// ttl below its period).
func (r Rule) Validate() error {
	if err := CheckName(r.Name); err != nil {
		return &FieldError{Field: "name", Msg: err.Error()}
	}
	return r.checkBucket()
}

// checkBucket is Validate without the name and key: the bucket, the
// strategy, its partition and params, then a throwaway instance.
func (r Rule) checkBucket() error {
	if err := r.checkRateBurst(); err != nil {
		return err
	}
	name := r.Strategy
	if name == "" {
		name = DefaultStrategy
	}
	info, err := registry.Lookup(name)
	if err != nil {
		return &FieldError{Field: "strategy", Msg: err.Error()}
	}
	if r.Partition != strategy.PartitionAvailable && r.Partition != strategy.PartitionConserve {
		return &FieldError{Field: "partition", Msg: fmt.Sprintf("%v: want available or conserve", r.Partition)}
	}
	params, err := strategy.ParseParams(r.Params)
	if err != nil {
		return &FieldError{Field: "params", Msg: err.Error()}
	}
	mode, err := r.partitionMode(params.Values())
	if err != nil {
		return err
	}
	if err := checkParams(name, info, params); err != nil {
		return err
	}
	params, _, _ = strategy.TakePartition(params) // checked above: mode
	return r.checkInstance(name, info, params, mode)
}

// checkRateBurst checks the token bucket: a rate above 0 that bucket
// takes, a burst of at least 1 that it can hold at that rate.
func (r Rule) checkRateBurst() error {
	if r.Rate.Tokens <= 0 {
		return &FieldError{Field: "rate", Msg: "must be above 0"}
	}
	if err := r.Rate.Validate(); err != nil {
		return &FieldError{Field: "rate", Msg: err.Error()}
	}
	if r.Burst < 1 {
		return &FieldError{Field: "burst", Msg: fmt.Sprintf("%d is below 1 (a bucket must hold at least one token)", r.Burst)}
	}
	if _, err := bucket.New(r.Rate, r.Burst, 0); err != nil {
		return &FieldError{Field: "burst", Msg: err.Error()}
	}
	return nil
}

// partitionMode is the rule's partition mode: Partition, or the partition
// parameter among values, which must then be a mode and agree with a
// Partition that is not the default.
func (r Rule) partitionMode(values map[string]string) (strategy.PartitionMode, error) {
	v, ok := values[strategy.PartitionParam]
	if !ok {
		return r.Partition, nil
	}
	pmode, err := strategy.ParsePartitionMode(v)
	if err != nil {
		return r.Partition, &FieldError{Field: "params.partition", Param: strategy.PartitionParam, Msg: fmt.Sprintf("%q: want available or conserve", v)}
	}
	if r.Partition != strategy.PartitionAvailable && pmode != r.Partition {
		return r.Partition, &FieldError{Field: "partition", Msg: fmt.Sprintf("%q and params.partition %q disagree", r.Partition, v)}
	}
	return pmode, nil
}

// checkParams checks every parameter's name, and its name and type
// against the declarations of the strategy name (info); the partition
// parameter is partitionMode's.
func checkParams(name string, info registry.Info, params strategy.Params) error {
	values := params.Values()
	for _, k := range params.Names() {
		v := values[k]
		if err := CheckParamName(k); err != nil {
			return &FieldError{Field: "params", Param: k, Msg: err.Error()}
		}
		if k == strategy.PartitionParam {
			continue // checked above
		}
		// Names and types come from the strategy's declarations
		// (registry.Info.Params); bounds beyond the type are the constructor's.
		if _, ok := strategy.FindParam(info.Params, k); !ok {
			return &FieldError{Field: "params", Param: k, Msg: strategy.CheckParam(name, info.Params, k, v).Error()}
		}
		if err := strategy.CheckParam(name, info.Params, k, v); err != nil {
			return &FieldError{Field: "params." + k, Param: k, Msg: err.Error()}
		}
	}
	return nil
}

// checkInstance makes a throwaway instance of the strategy name (info)
// with params and the partition mode, and checks that the strategy
// supports the mode.
func (r Rule) checkInstance(name string, info registry.Info, params strategy.Params, mode strategy.PartitionMode) error {
	// A throwaway instance lets the strategy itself reject values out of
	// their bounds or that disagree with each other, and any rate/burst it
	// cannot split; names and types were checked against the declarations
	// above.
	self := strategy.NodeID("rule-check")
	inst, err := info.New(strategy.Config{
		Self: self, Members: []strategy.NodeID{self}, Rate: r.Rate, Burst: r.Burst,
		Rand: rand.New(rand.NewPCG(1, 2)), Params: params, Partition: mode,
	})
	if err != nil {
		f := "strategy"
		if len(r.Params) > 0 {
			f = "params"
		}
		msg := err.Error()
		if !strings.Contains(msg, name) {
			msg = "strategy " + name + ": " + msg
		}
		return &FieldError{Field: f, Msg: msg}
	}
	if err := strategy.CheckPartition(name, inst, mode); err != nil {
		return &FieldError{Field: "partition", Msg: err.Error()}
	}
	return nil
}

// ErrRate is wrapped by PerSecond for a rate bucket.PerSecond rejects.
var ErrRate = errors.New("rule: bad rate")

// PerSecond is a rule in the units users write: tokensPerSec tokens per
// second (converted exactly where bucket.PerSecond can: up to 6 decimal
// places) refill a bucket of burst tokens per key, under the default
// strategy; set Strategy, Params and Partition on the result as needed.
// Errors (wrapping ErrRate and naming the rule): a rate that is not
// finite, not above 0, or that bucket.PerSecond cannot represent.
func PerSecond(name string, tokensPerSec float64, burst int64) (Rule, error) {
	rate, err := bucket.PerSecond(tokensPerSec)
	if err != nil {
		return Rule{}, fmt.Errorf("%w: rule %q: %v", ErrRate, name, err)
	}
	return Rule{Name: name, Rate: rate, Burst: burst, Strategy: DefaultStrategy}, nil
}
