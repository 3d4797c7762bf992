package strategy

import (
	"fmt"
	"strings"
)

// ParamType is the type of a strategy parameter's value, as text on the
// command line (--param owner.hold=5ms) or in a rule's YAML params.
type ParamType string

// The parameter types. Their syntax is what ReadParams accepts.
const (
	// ParamDuration: a Go duration ("300ms", "2s"), not negative.
	ParamDuration ParamType = "duration"
	// ParamInt: a whole number in decimal ("4").
	ParamInt ParamType = "int"
	// ParamFloat: a finite decimal or exponent number ("0.02", "1e-3").
	ParamFloat ParamType = "float"
	// ParamBool: true or false (also 1/0, t/f as strconv.ParseBool).
	ParamBool ParamType = "bool"
	// ParamString: any text (it may contain commas, see ParseParams).
	ParamString ParamType = "string"
	// ParamEnum: one of ParamSpec.Enum.
	ParamEnum ParamType = "enum"
)

// ParamSpec declares one parameter of a strategy: each strategy package
// exports its list (var Params []strategy.ParamSpec, in its params.go),
// and strategy/registry's Info.Params refers to it. Config validation, the
// CLI's --param parsing and `tokenmesh strategies` read the declarations,
// and so does the constructor: it reads typed values from ReadParams
// (Values), so the declarations are the parser (ours; the seeds have no
// configuration syntax). A test in strategy/registry checks that every
// constructor reads every parameter it declares.
type ParamSpec struct {
	Name string    // as given after "strategy." (hold, on_timeout)
	Type ParamType // syntax of the value
	// Unit of the value ("tokens", "standard errors"), empty when the type
	// says it all (a duration) or the value has none.
	Unit string
	// Default as text: a value of Type, or a formula in the other
	// parameters and the latency hint ("3*latency_hint + 100ms"), or ""
	// when unset means something the Doc explains (a deprecated alias).
	Default string
	// Example is a valid value of the parameter on its own (the other
	// parameters at their defaults): shown by --help and used by tests.
	Example string
	Doc     string   // one or a few sentences: what it does, bounds, source section
	Enum    []string // the values of a ParamEnum, in the order shown
}

// TypeText is the type as shown in listings: the enum's values joined by
// " | " for an enum, the type name otherwise.
func (s ParamSpec) TypeText() string {
	if s.Type == ParamEnum {
		return strings.Join(s.Enum, " | ")
	}
	return string(s.Type)
}

// CheckValue parses value as s's type. The error names the parameter, the
// value and the expected type (not the strategy: see CheckParam). Bounds
// beyond the type (a positive timeout, a gain in (0, 1]) are the
// constructor's to check.
func (s ParamSpec) CheckValue(value string) error {
	_, err := s.parse(value)
	return err
}

// FindParam returns the spec called name in specs.
func FindParam(specs []ParamSpec, name string) (ParamSpec, bool) {
	for _, s := range specs {
		if s.Name == name {
			return s, true
		}
	}
	return ParamSpec{}, false
}

// CheckParam checks one unprefixed name=value for strategy against its
// declarations: an undeclared name is an error listing the declared ones,
// a value that does not parse as the declared type an error naming the
// strategy, parameter, value and type. The generic PartitionParam is
// accepted by every strategy and checked here too (available | conserve).
func CheckParam(strategy string, specs []ParamSpec, name, value string) error {
	if name == PartitionParam {
		if _, err := ParsePartitionMode(value); err != nil {
			return fmt.Errorf("strategy %s: parameter %s=%q: want available or conserve", strategy, name, value)
		}
		return nil
	}
	s, ok := FindParam(specs, name)
	if !ok {
		if isOverdraftParam(name) {
			return OverdraftUnsupported(strategy, name)
		}
		if len(specs) == 0 {
			return fmt.Errorf("strategy %s takes no parameters, got %s", strategy, name)
		}
		names := make([]string, len(specs))
		for i, s := range specs {
			names[i] = s.Name
		}
		return fmt.Errorf("strategy %s: unknown parameter %s (it knows %s)", strategy, name, strings.Join(names, ", "))
	}
	if err := s.CheckValue(value); err != nil {
		return fmt.Errorf("strategy %s: %w", strategy, err)
	}
	return nil
}

// CheckParams checks every name=value of p (unprefixed, as Params.For
// returns them) with CheckParam, in name order; the first error is
// returned.
func CheckParams(strategy string, specs []ParamSpec, p Params) error {
	for _, name := range p.Names() {
		if err := CheckParam(strategy, specs, name, p.values[name]); err != nil {
			return err
		}
	}
	return nil
}

// PartitionSpec declares the generic parameter PartitionParam, which every
// strategy takes (see PartitionMode).
var PartitionSpec = ParamSpec{Name: PartitionParam, Type: ParamEnum, Enum: []string{"available", "conserve"},
	Default: "available", Example: "conserve",
	Doc: "generic: what a node cut off from part of the cluster does; conserve keeps the envelope, available keeps serving (see strategy.PartitionMode)"}

// ParamDoc renders specs as the "# Parameters" section of a strategy's
// package documentation (without the comment markers): one list item per
// parameter with its type, unit and default, then its doc. The params.go
// of each strategy package carries this text, and a test compares it.
func ParamDoc(specs []ParamSpec) string {
	var b strings.Builder
	b.WriteString("# Parameters\n\n")
	if len(specs) == 0 {
		b.WriteString("The strategy takes no parameters besides the generic partition.\n")
		return b.String()
	}
	b.WriteString("Declared in Params (strategy.ParamSpec); given as NAME=value in a rule's\nparams or --param STRATEGY.NAME=value; the generic partition too.\n\n")
	for _, s := range specs {
		head := s.TypeText()
		if s.Unit != "" {
			head += ", " + s.Unit
		}
		if s.Default != "" {
			head += ", default " + s.Default
		}
		b.WriteString(wrap("  - ", s.Name+" ("+head+"): "+s.Doc, "    ", 76))
	}
	return b.String()
}

// wrap breaks text at spaces into lines of at most width characters (a
// longer word stays whole); the first line starts with first, the others
// with indent.
func wrap(first, text, indent string, width int) string {
	var b strings.Builder
	line := first
	empty := true
	for _, w := range strings.Fields(text) {
		switch {
		case empty:
			line += w
			empty = false
		case len(line)+1+len(w) > width:
			b.WriteString(line + "\n")
			line = indent + w
		default:
			line += " " + w
		}
	}
	b.WriteString(line + "\n")
	return b.String()
}
