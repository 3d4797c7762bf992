// Package envoyrls is tokenmesh's drop-in for Envoy's global rate limit
// service: it reads envoyproxy/ratelimit's YAML descriptor configuration
// (a directory of files, each one domain), matches request descriptors
// against it with envoyproxy/ratelimit's semantics, and serves
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit with the
// decisions of a tokenmesh cluster (cluster.Node.CheckBatch).
//
// # What is theirs, what is ours
//
// Theirs (envoyproxy/ratelimit, README "Configuration" and
// src/config/config_impl.go, src/service/ratelimit.go; read, not copied):
// the file format (domain, descriptors with key, value, rate_limit
// {requests_per_unit, unit, unlimited, name, replaces}, shadow_mode,
// quota_mode, detailed_metric, value_to_metric, share_threshold, nested
// descriptors), the lookup (key_value first, then a wildcard value
// "files/*" by prefix, then the bare key as a default; a limit applies only
// when the request's last entry lands on a descriptor with a rate_limit),
// unknown domains and unmatched descriptors answered OK without a limit,
// unlimited, shadow_mode (decided and counted, never refused), replaces
// (a matched limit that names another limit's name drops it from the
// request), hits_addend 0 counted as 1, the x-ratelimit-* headers of
// the descriptor closest to its limit, and a descriptor's own limit
// (RateLimitDescriptor.limit, a limit override) applied in a known domain
// whether the descriptor matches or not (override.go).
//
// Ours: every descriptor with a rate_limit becomes one tokenmesh rule
// (RuleName: a stable name from the domain and the descriptor path) whose
// token bucket has rate requests_per_unit per unit and burst
// requests_per_unit, enforced by a coordination strategy (default owner);
// the key of a request within that rule is built from its descriptor
// entries' values (Match). A limit override is a rule of its own, derived
// on demand from the descriptor and the limit, alike on every node
// (OverrideRuleName, Config.Deriver, cluster.Node.EnsureDerived). A small extension key, tokenmesh, sets the
// strategy and its parameters per file (domain) or per descriptor
// (inherited by nested descriptors):
//
//	domain: rl
//	tokenmesh: {strategy: owner}
//	descriptors:
//	  - key: remote_address
//	    rate_limit: {unit: second, requests_per_unit: 10}
//	    tokenmesh: {strategy: gdrl, params: {gossip: 20ms}}
//
// envoyproxy/ratelimit refuses unknown keys, so a file using tokenmesh: is
// for tokenmesh only; without it, files are read as they are.
//
// The params of the strategies that keep a token bucket per key include
// overdraft and max_debt (strategy.OverdraftSpecs; ours):
// with them a hits_addend of 1 or more is a charge, taken whatever is
// left (Envoy's apply_on_stream_done hits: an LLM response's tokens), and
// the key refuses checks (hits_addend 0) until the refill has repaid its
// debt; the other strategies refuse them (docs/ENVOY.md, "Costs known
// after the response: overdraft"):
//
//	tokenmesh: {params: {overdraft: true, max_debt: 5000}}
//
// The extension's algorithm is token_bucket (the default) or fixed_window:
// envoyproxy/ratelimit's own counting (clock-aligned windows of the unit,
// every hit counted, refused ones too), for users who need the numbers they
// see today; it is decided at the key's rendezvous owner (strategy
// fixedwindow), so it goes with strategy owner (the default) only:
//
//	tokenmesh: {algorithm: fixed_window}
//
// Difference from envoyproxy/ratelimit's counting: it counts hits in
// clock-aligned fixed windows (a Redis INCRBY per window; refused hits are
// counted too), tokenmesh refills a token bucket continuously and a
// refused check takes no token. A client at the limit gets requests_per_unit
// per unit from both, but the bucket never admits 2x the limit across a
// window boundary, and limit_remaining/duration_until_reset are the
// bucket's (tokens left; time until the bucket is full again).
package envoyrls

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"gopkg.in/yaml.v3"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy/fixedwindow"
)

// Limits on what a configuration may hold (a file is read whole).
const (
	// MaxFileBytes bounds one YAML file, in bytes (4 MiB).
	MaxFileBytes = 4 << 20
	// MaxDepth bounds the nesting of descriptors.
	MaxDepth = 16
	// MaxRuleNameBytes is the longest tokenmesh rule name (config's limit).
	MaxRuleNameBytes = 128
)

// RulePrefix starts the name of every rule derived from an envoy config.
const RulePrefix = "rls."

// Error is a configuration error: the file, the line where known, the
// field path inside the file ("descriptors[0].rate_limit.unit") and what
// is wrong; config's error type, printed "file:line: field: msg" (ours).
type Error = config.Error

// Limit is one descriptor's rate_limit, as loaded.
type Limit struct {
	// Domain is the file's domain.
	Domain string
	// Path is envoyproxy/ratelimit's full key of the descriptor:
	// "domain.key_value.key2" (a descriptor without a value contributes its
	// key only).
	Path string
	// Rule is the tokenmesh rule that enforces the limit (RuleName); "" for
	// an unlimited limit or requests_per_unit 0 (always over the limit),
	// which need no rule.
	Rule string
	// RequestsPerUnit and Unit are the limit as written.
	RequestsPerUnit uint32
	Unit            rlsv3.RateLimitResponse_RateLimit_Unit
	// Name is rate_limit.name (optional); Replaces the names this limit
	// replaces when it matches.
	Name     string
	Replaces []string
	// Unlimited: matched descriptors are never limited and not counted.
	Unlimited bool
	// ShadowMode (and QuotaMode, treated alike for the verdict): decided
	// and counted, answered OK even when over the limit.
	ShadowMode bool
	QuotaMode  bool
	// Strategy and Params are the tokenmesh extension's (default owner,
	// none); fixedwindow for Algorithm fixed_window.
	Strategy string
	Params   map[string]string
	// Algorithm is AlgorithmTokenBucket or AlgorithmFixedWindow.
	Algorithm string
	// Override marks a limit made for a descriptor's limit override
	// (MatchOverride), not loaded from a file: Rule is a derived rule.
	Override bool

	period       time.Duration // an override's Period; 0: one Unit
	overrideBase string        // OverrideBase
}

// Period is the limit's refill period: one Unit (UnitDuration), or an
// override's unit_multiplier units.
func (l *Limit) Period() time.Duration {
	if l.period > 0 {
		return l.period
	}
	return UnitDuration(l.Unit)
}

// UnitDuration is the length of unit u (envoyproxy/ratelimit's divider:
// a month is 30 days, a year 365); 0 for UNKNOWN.
func UnitDuration(u rlsv3.RateLimitResponse_RateLimit_Unit) time.Duration {
	day := 24 * time.Hour
	switch u {
	case rlsv3.RateLimitResponse_RateLimit_SECOND:
		return time.Second
	case rlsv3.RateLimitResponse_RateLimit_MINUTE:
		return time.Minute
	case rlsv3.RateLimitResponse_RateLimit_HOUR:
		return time.Hour
	case rlsv3.RateLimitResponse_RateLimit_DAY:
		return day
	case rlsv3.RateLimitResponse_RateLimit_WEEK:
		return 7 * day
	case rlsv3.RateLimitResponse_RateLimit_MONTH:
		return 30 * day
	case rlsv3.RateLimitResponse_RateLimit_YEAR:
		return 365 * day
	}
	return 0
}

// node is one level of a domain's descriptor tree (envoyproxy/ratelimit's
// rateLimitDescriptor).
type node struct {
	children map[string]*node // by "key_value", or "key" for a descriptor without value
	wildcard []string         // children keys ending in '*', in file order
	limit    *Limit
	// pattern is the wildcard value ("files/*") when share_threshold is
	// set: every value matching it shares one bucket.
	pattern string
}

// Domain is one file's domain.
type Domain struct {
	Name string
	File string
	root node
	// anyBase is the override base of the domain's entries that match no
	// configured limit (anyBaseName).
	anyBase string
}

// Config is a loaded directory: domains by name and every limit.
type Config struct {
	// DefaultStrategy is the strategy of a limit whose file's tokenmesh
	// extension names none (node.envoy_strategy); "" is
	// config.DefaultStrategy (owner). Set before Add (LoadDirWith).
	DefaultStrategy string

	Domains map[string]*Domain
	// Limits lists every descriptor limit, in file order (files sorted by
	// name).
	Limits []*Limit

	// bases are the limit overrides' bases (override.go) by name: one per
	// limit and one per domain; ruleNames the configured limits' rule names
	// (to their paths).
	bases     map[string]*overrideBase
	ruleNames map[string]string
	cache     *overrideCache // the overrides made (override.go); set by Add
}

// LoadDir reads every *.yaml and *.yml file directly in dir (sorted by
// name; hidden files and subdirectories are skipped), one domain each, as
// envoyproxy/ratelimit does with its runtime config directory. A domain
// in two files is refused (envoyproxy/ratelimit's default,
// MERGE_DOMAIN_CONFIG off). An empty directory is an error. Errors are
// *Error, naming the file and the field.
func LoadDir(dir string) (*Config, error) { return LoadDirWith(dir, LoadOptions{}) }

// LoadOptions are what a node sets for every file of its Envoy config.
type LoadOptions struct {
	// DefaultStrategy is Config.DefaultStrategy: the strategy of the
	// limits of files without a tokenmesh extension that names one (quota
	// serves RLQS from envoyproxy/ratelimit's files as they are); ""
	// is owner. Not checked here: a name no strategy has is refused by the
	// rules' check (config.CheckRule), naming the limit.
	DefaultStrategy string
}

// LoadDirWith is LoadDir with o applied to every file.
func LoadDirWith(dir string, o LoadOptions) (*Config, error) {
	files, err := configFiles(dir)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, &Error{File: dir, Msg: "holds no *.yaml or *.yml file (want envoy ratelimit config files: domain: and descriptors:)"}
	}
	c := &Config{Domains: map[string]*Domain{}, DefaultStrategy: o.DefaultStrategy}
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			return nil, &Error{File: f, Msg: err.Error()}
		}
		if fi.Size() > MaxFileBytes {
			return nil, &Error{File: f, Msg: fmt.Sprintf("%d bytes; at most %d", fi.Size(), MaxFileBytes)}
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, &Error{File: f, Msg: err.Error()}
		}
		if err := c.Add(f, data); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// configFiles are the paths of the files LoadDir reads in dir: *.yaml
// and *.yml directly in it, hidden files and directories skipped, sorted.
func configFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, &Error{File: dir, Msg: err.Error()}
	}
	var files []string
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || strings.HasPrefix(n, ".") || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
			continue
		}
		files = append(files, filepath.Join(dir, n))
	}
	sort.Strings(files)
	return files, nil
}

// Digest is a SHA-256 over what LoadDir reads in dir: the name and the
// bytes of each of its files, in LoadDir's order (a file that does not
// read counts with its error text). Two equal digests mean LoadDir would
// read the same config; a reload compares them to skip a change that
// changed nothing (a file touched, another kind of file written). The
// zero value when dir itself does not read.
func Digest(dir string) [sha256.Size]byte {
	files, err := configFiles(dir)
	if err != nil {
		return [sha256.Size]byte{}
	}
	h := sha256.New()
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			data = []byte(err.Error())
		}
		// Length-prefixed, so that no two different directories hash alike.
		fmt.Fprintf(h, "%d:%s%d:", len(f), f, len(data))
		h.Write(data)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// Parse reads one file's content (named name in errors) into a new Config.
func Parse(name string, data []byte) (*Config, error) {
	c := &Config{Domains: map[string]*Domain{}}
	if err := c.Add(name, data); err != nil {
		return nil, err
	}
	return c, nil
}

// Add parses one file and adds its domain to c. On error c is unchanged.
func (c *Config) Add(name string, data []byte) error {
	if len(data) > MaxFileBytes {
		return &Error{File: name, Msg: fmt.Sprintf("%d bytes; at most %d", len(data), MaxFileBytes)}
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return &Error{File: name, Msg: "the file is empty (want domain: and descriptors:)"}
		}
		return config.YAMLError(name, err.Error())
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return &Error{File: name, Msg: "more than one YAML document (want one)"}
	}
	p := &parser{file: name, names: map[string]string{}, bases: map[string]*overrideBase{}, defStrategy: c.DefaultStrategy}
	if p.defStrategy == "" {
		p.defStrategy = config.DefaultStrategy
	}
	for _, l := range c.Limits {
		if l.Rule != "" {
			p.names[l.Rule] = l.Path
		}
	}
	maps.Copy(p.bases, c.bases)
	d := p.parseFile(&doc)
	if p.err != nil {
		return p.err
	}
	if prev, dup := c.Domains[d.Name]; dup {
		return &Error{File: name, Line: p.domainLine, Field: "domain",
			Msg: fmt.Sprintf("duplicate domain %q: already in %s (one file per domain)", d.Name, prev.File)}
	}
	c.Domains[d.Name] = d
	c.Limits = append(c.Limits, p.limits...)
	c.bases, c.ruleNames = p.bases, p.names
	if c.cache == nil {
		c.cache = &overrideCache{m: map[overrideLimitKey]overrideLimit{}}
	}
	return nil
}

// Rules returns the tokenmesh rules of c's limits, in c.Limits order, for
// a node whose time base (limiter.Config.Epoch) is epoch: fixed_window
// rules get the strategy parameter align (epoch's Unix time modulo the
// unit) so that their windows are Unix-aligned like envoyproxy/ratelimit's.
// Every node of a cluster must load the same files with the same epoch:
// peers name rules in their frames.
func (c *Config) Rules(epoch time.Time) []rule.Rule {
	var out []rule.Rule
	for _, l := range c.Limits {
		if l.Rule == "" {
			continue
		}
		cr := l.configRule()
		if l.Algorithm == AlgorithmFixedWindow {
			params := maps.Clone(l.Params)
			if params == nil {
				params = map[string]string{}
			}
			unit := UnitDuration(l.Unit)
			params["align"] = (time.Duration(epoch.UnixNano()%int64(unit)+int64(unit)) % unit).String()
			cr.Params = rule.Pairs(params)
		}
		r, _ := config.CheckRule(cr) // validated when loaded
		out = append(out, r)
	}
	return out
}

// HasFixedWindow reports whether any limit uses algorithm fixed_window,
// or could with a limit override (a descriptor's, or a domain's
// extension): its node then needs a wall-clock epoch (Rules, Deriver).
func (c *Config) HasFixedWindow() bool {
	for _, l := range c.Limits {
		if l.Algorithm == AlgorithmFixedWindow && l.Rule != "" {
			return true
		}
	}
	for _, b := range c.bases { // a limit override's rule may be one
		if b.algorithm == AlgorithmFixedWindow {
			return true
		}
	}
	return false
}

// configRule is the limit's rule in config's terms.
func (l *Limit) configRule() rule.Rule {
	per := UnitDuration(l.Unit)
	n := int64(l.RequestsPerUnit)
	return rule.Rule{Name: l.Rule, Key: config.DefaultKey, Rate: bucket.Rate{Tokens: n, Per: per}.Reduced(),
		Burst: n, Strategy: l.Strategy, Params: rule.Pairs(l.Params)}
}

// RuleName is the tokenmesh rule name of the limit at path (envoy's full
// key, "domain.key_value.key2"): RulePrefix and the path with every byte
// outside [A-Za-z0-9_.-] replaced by '_'; when that changed anything or
// the name would exceed MaxRuleNameBytes, it is cut and "-" and 8 hex
// digits of a hash (FNV-1a 32) of path are appended, so the name is stable
// across restarts and nodes and distinct paths get distinct names.
func RuleName(path string) string { return ruleName(path, MaxRuleNameBytes) }

// ruleName is RuleName with names of at most limit bytes.
func ruleName(path string, limit int) string {
	var b strings.Builder
	b.WriteString(RulePrefix)
	changed := false
	for i := 0; i < len(path); i++ {
		c := path[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
			changed = true
		}
	}
	name := b.String()
	if !changed && len(name) <= limit {
		return name
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(path))
	suffix := fmt.Sprintf("-%08x", h.Sum32())
	if len(name) > limit-len(suffix) {
		name = name[:limit-len(suffix)]
	}
	return name + suffix
}

// Algorithms of the tokenmesh extension.
const (
	AlgorithmTokenBucket = "token_bucket"
	AlgorithmFixedWindow = "fixed_window"
)

// ext is the tokenmesh extension in force at one level.
type ext struct {
	strategy  string
	params    map[string]string
	algorithm string
}

type parser struct {
	defStrategy string // a limit's strategy without an extension naming one (Config.DefaultStrategy)
	file        string
	err         *Error
	domain      string
	domainLine  int
	limits      []*Limit
	names       map[string]string        // rule name -> path, to refuse collisions
	bases       map[string]*overrideBase // override base name -> base, likewise
}

// addBase records the override base of path (a limit's, or a domain's
// unmatched entries'), refusing a name another path has (at n, field).
func (p *parser) addBase(n *yaml.Node, field, name string, b *overrideBase) {
	// The same path again is a duplicate domain, which Add reports.
	if other, dup := p.bases[name]; dup && other.path != b.path && p.err == nil {
		p.fail(n, field, "the limit overrides' rule names of %q (%s--...) collide with those of %q; rename a descriptor or domain", b.path, name, other.path)
		return
	}
	p.bases[name] = b
}

func (p *parser) fail(n *yaml.Node, field, format string, args ...any) {
	if p.err != nil {
		return
	}
	line := 0
	if n != nil {
		line = n.Line
	}
	p.err = &Error{File: p.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// fields checks that n is a mapping of known keys with scalar-string keys
// and returns key -> (key node, value node).
func (p *parser) fields(n *yaml.Node, field string, known ...string) map[string][2]*yaml.Node {
	if n.Kind == yaml.AliasNode {
		p.fail(n, field, "YAML aliases are not supported here")
		return nil
	}
	if n.Kind != yaml.MappingNode {
		p.fail(n, field, "want a mapping (known keys: %s), got %s", strings.Join(known, ", "), kind(n))
		return nil
	}
	out := map[string][2]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			p.fail(k, field, "a key is not a string")
			return nil
		}
		sub := join(field, k.Value)
		if !slices.Contains(known, k.Value) {
			p.fail(k, sub, "unknown key (known: %s)", strings.Join(known, ", "))
			return nil
		}
		if _, dup := out[k.Value]; dup {
			p.fail(k, sub, "repeated key")
			return nil
		}
		out[k.Value] = [2]*yaml.Node{k, v}
	}
	return out
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

func kind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "something else"
}

// str reads a string scalar (numbers and booleans are taken as written,
// as envoyproxy/ratelimit's YAML decoding into strings does).
func (p *parser) str(n *yaml.Node, field string) string {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.fail(n, field, "want a string, got %s", kind(n))
		return ""
	}
	return n.Value
}

func (p *parser) boolean(n *yaml.Node, field string) bool {
	var b bool
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		p.fail(n, field, "want true or false, got %s", kind(n))
	}
	return b
}

func (p *parser) list(n *yaml.Node, field string) []*yaml.Node {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.fail(n, field, "want a list, got %s", kind(n))
		return nil
	}
	return n.Content
}

func (p *parser) parseFile(doc *yaml.Node) *Domain {
	root := doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		root = doc.Content[0]
	}
	fs := p.fields(root, "", "domain", "descriptors", "tokenmesh")
	if p.err != nil {
		return nil
	}
	kv, ok := fs["domain"]
	if !ok {
		p.fail(root, "domain", "is required")
		return nil
	}
	d := &Domain{File: p.file, root: node{children: map[string]*node{}}}
	d.Name = p.str(kv[1], "domain")
	p.domainLine = kv[1].Line
	if p.err == nil && d.Name == "" {
		p.fail(kv[1], "domain", "is empty")
	}
	p.domain = d.Name
	x := ext{strategy: p.defStrategy, algorithm: AlgorithmTokenBucket}
	if t, ok := fs["tokenmesh"]; ok {
		x = p.ext(t[1], "tokenmesh", x)
	}
	if p.err == nil {
		// The domain's extension, as a limit at its top would have it
		// (fixed_window goes with owner only: with another strategy the
		// domain's unmatched entries are token buckets of that strategy).
		b := &overrideBase{domain: d.Name, path: d.Name + ".*", strategy: x.strategy, params: maps.Clone(x.params), algorithm: x.algorithm}
		switch {
		case x.algorithm == AlgorithmFixedWindow && x.strategy == config.DefaultStrategy:
			b.strategy = fixedwindow.Name
		case x.algorithm == AlgorithmFixedWindow:
			b.algorithm = AlgorithmTokenBucket
		}
		d.anyBase = anyBaseName(d.Name)
		p.addBase(kv[1], "domain", d.anyBase, b)
	}
	if ds, ok := fs["descriptors"]; ok {
		p.descriptors(&d.root, p.list(ds[1], "descriptors"), "descriptors", d.Name+".", x, 1)
	}
	if p.err != nil {
		return nil
	}
	return d
}

// ext reads a tokenmesh extension mapping over the inherited one.
func (p *parser) ext(n *yaml.Node, field string, in ext) ext {
	fs := p.fields(n, field, "strategy", "params", "algorithm")
	if p.err != nil {
		return in
	}
	out := ext{strategy: in.strategy, params: in.params, algorithm: in.algorithm}
	if a, ok := fs["algorithm"]; ok {
		out.algorithm = p.str(a[1], field+".algorithm")
		if p.err == nil && out.algorithm != AlgorithmTokenBucket && out.algorithm != AlgorithmFixedWindow {
			p.fail(a[1], field+".algorithm", "%q: want %s or %s", out.algorithm, AlgorithmTokenBucket, AlgorithmFixedWindow)
		}
	}
	if s, ok := fs["strategy"]; ok {
		out.strategy = p.str(s[1], field+".strategy")
		out.params = nil // parameters belong to the strategy they were set for
	}
	if pm, ok := fs["params"]; ok {
		m := map[string]string{}
		pfs := pm[1]
		if pfs.Kind != yaml.MappingNode {
			p.fail(pfs, field+".params", "want a mapping of name: value, got %s", kind(pfs))
			return in
		}
		for i := 0; i+1 < len(pfs.Content); i += 2 {
			k := pfs.Content[i]
			m[k.Value] = p.str(pfs.Content[i+1], field+".params."+k.Value)
		}
		out.params = m
	}
	return out
}

// descriptors reads the descriptors list of parent (at field, nested
// depth levels deep) into parent's children, one descriptor after the
// other until the first error.
func (p *parser) descriptors(parent *node, list []*yaml.Node, field, parentPath string, x ext, depth int) {
	if depth > MaxDepth {
		if len(list) > 0 {
			p.fail(list[0], field, "descriptors nested deeper than %d levels", MaxDepth)
		}
		return
	}
	for i, dn := range list {
		if p.err != nil {
			return
		}
		p.descriptor(parent, dn, fmt.Sprintf("%s[%d]", field, i), parentPath, x, depth)
	}
}

// descriptor reads one descriptor dn (at field f) into a child of parent:
// its key and value, flags, tokenmesh extension, rate_limit and nested
// descriptors.
func (p *parser) descriptor(parent *node, dn *yaml.Node, f, parentPath string, x ext, depth int) {
	fs := p.fields(dn, f, "key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode",
		"detailed_metric", "value_to_metric", "share_threshold", "tokenmesh")
	if p.err != nil {
		return
	}
	key, value, ok := p.descriptorKey(dn, fs, f)
	if !ok {
		return
	}
	shadow, quota, share := p.descriptorFlags(fs, f)
	final := key
	if value != "" {
		final += "_" + value
	}
	path := parentPath + final
	if _, dup := parent.children[final]; dup {
		p.fail(dn, f, "duplicate descriptor composite key %q", path)
		return
	}
	if share && !strings.HasSuffix(final, "*") {
		p.fail(fs["share_threshold"][0], f+".share_threshold", "can only be used with a wildcard value (ending with '*'), but the descriptor is %q", final)
		return
	}
	lx := x
	if t, ok := fs["tokenmesh"]; ok {
		lx = p.ext(t[1], f+".tokenmesh", x)
	}
	child := &node{children: map[string]*node{}}
	if share {
		child.pattern = strings.TrimPrefix(final, key+"_")
	}
	if rl, ok := fs["rate_limit"]; ok {
		child.limit = p.rateLimit(rl[1], f+".rate_limit", path, lx)
		if child.limit != nil {
			child.limit.ShadowMode, child.limit.QuotaMode = shadow, quota
		}
	}
	if p.err != nil {
		return
	}
	if strings.HasSuffix(final, "*") {
		parent.wildcard = append(parent.wildcard, final)
	}
	parent.children[final] = child
	if sub, ok := fs["descriptors"]; ok {
		p.descriptors(child, p.list(sub[1], f+".descriptors"), f+".descriptors", path+".", lx, depth+1)
	}
}

// descriptorKey reads a descriptor's key (required: false when it is
// empty, the error recorded) and value.
func (p *parser) descriptorKey(dn *yaml.Node, fs map[string][2]*yaml.Node, f string) (key, value string, ok bool) {
	if k, ok := fs["key"]; ok {
		key = p.str(k[1], f+".key")
	}
	if key == "" {
		p.fail(dn, f+".key", "is required (descriptor has empty key)")
		return "", "", false
	}
	if v, ok := fs["value"]; ok {
		value = p.str(v[1], f+".value")
	}
	return key, value, true
}

// descriptorFlags reads a descriptor's shadow_mode, quota_mode and
// share_threshold (false when absent); detailed_metric and
// value_to_metric are read and ignored (metrics naming only: accepted,
// no effect on decisions).
func (p *parser) descriptorFlags(fs map[string][2]*yaml.Node, f string) (shadow, quota, share bool) {
	flag := func(name string) bool {
		if v, ok := fs[name]; ok {
			return p.boolean(v[1], f+"."+name)
		}
		return false
	}
	shadow, quota, share = flag("shadow_mode"), flag("quota_mode"), flag("share_threshold")
	flag("detailed_metric") // metrics naming only: accepted, no effect on decisions
	flag("value_to_metric")
	return shadow, quota, share
}

// rateLimit reads a descriptor's rate_limit (at field; the descriptor's
// path and tokenmesh extension x) into a Limit, with its rule checked
// (config.CheckRule) and its override base added; nil on an error.
func (p *parser) rateLimit(n *yaml.Node, field, path string, x ext) *Limit {
	fs := p.fields(n, field, "requests_per_unit", "unit", "unlimited", "name", "replaces")
	if p.err != nil {
		return nil
	}
	l := &Limit{Domain: p.domain, Path: path, Strategy: x.strategy, Params: maps.Clone(x.params), Algorithm: x.algorithm}
	if l.Algorithm == AlgorithmFixedWindow {
		if l.Strategy != config.DefaultStrategy {
			p.fail(n, field, "algorithm fixed_window is decided at the key's owner: it goes with strategy owner, not %q", l.Strategy)
			return nil
		}
		l.Strategy = fixedwindow.Name
	}
	p.limitUnit(n, fs, field, l)
	p.limitRequests(n, fs, field, l)
	if v, ok := fs["name"]; ok {
		l.Name = p.str(v[1], field+".name")
	}
	if v, ok := fs["replaces"]; ok {
		p.limitReplaces(v[1], field, l)
	}
	if p.err != nil {
		return nil
	}
	if !p.limitRule(n, field, path, l) {
		return nil
	}
	l.overrideBase = baseName(path)
	p.addBase(n, field, l.overrideBase, &overrideBase{domain: l.Domain, path: path, seed: l.Rule,
		strategy: l.Strategy, params: maps.Clone(l.Params), algorithm: l.Algorithm})
	if p.err != nil {
		return nil
	}
	p.limits = append(p.limits, l)
	return l
}

// limitUnit reads a rate_limit's unlimited and unit: a unit is required
// unless unlimited, and refused with it.
func (p *parser) limitUnit(n *yaml.Node, fs map[string][2]*yaml.Node, field string, l *Limit) {
	if v, ok := fs["unlimited"]; ok {
		l.Unlimited = p.boolean(v[1], field+".unlimited")
	}
	unitText := ""
	if v, ok := fs["unit"]; ok {
		unitText = p.str(v[1], field+".unit")
	}
	uv, known := rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(unitText)]
	valid := known && uv != int32(rlsv3.RateLimitResponse_RateLimit_UNKNOWN)
	switch {
	case l.Unlimited && valid:
		p.fail(fs["unit"][1], field+".unit", "should not be set when unlimited is true")
	case !l.Unlimited && !valid:
		at := n
		if v, ok := fs["unit"]; ok {
			at = v[1]
		}
		p.fail(at, field+".unit", "invalid rate limit unit %q (want second, minute, hour, day, week, month or year)", unitText)
	}
	if valid {
		l.Unit = rlsv3.RateLimitResponse_RateLimit_Unit(uv)
	}
}

// limitRequests reads a rate_limit's requests_per_unit (required unless
// unlimited).
func (p *parser) limitRequests(n *yaml.Node, fs map[string][2]*yaml.Node, field string, l *Limit) {
	v, ok := fs["requests_per_unit"]
	if !ok {
		if !l.Unlimited {
			p.fail(n, field+".requests_per_unit", "is required")
		}
		return
	}
	s := p.str(v[1], field+".requests_per_unit")
	u, err := strconv.ParseUint(s, 10, 32)
	if p.err == nil && err != nil {
		p.fail(v[1], field+".requests_per_unit", "%q is not a whole number from 0 to %d", s, uint32(1<<32-1))
	}
	l.RequestsPerUnit = uint32(u)
}

// limitReplaces reads a rate_limit's replaces (the list n): names, none
// empty nor the limit's own.
func (p *parser) limitReplaces(n *yaml.Node, field string, l *Limit) {
	for i, r := range p.list(n, field+".replaces") {
		rf := fmt.Sprintf("%s.replaces[%d]", field, i)
		rfs := p.fields(r, rf, "name")
		if p.err != nil {
			return
		}
		name := ""
		if nv, ok := rfs["name"]; ok {
			name = p.str(nv[1], rf+".name")
		}
		switch {
		case name == "":
			p.fail(r, rf+".name", "should not be empty")
		case name == l.Name:
			p.fail(r, rf+".name", "%q is this limit's own name", name)
		}
		l.Replaces = append(l.Replaces, name)
	}
}

// limitRule gives a limit that is decided (not unlimited, requests_per_unit
// above 0) its rule name, unique in the file and valid as a tokenmesh rule;
// false on an error.
func (p *parser) limitRule(n *yaml.Node, field, path string, l *Limit) bool {
	if l.Unlimited || l.RequestsPerUnit == 0 {
		return true
	}
	l.Rule = RuleName(path)
	if other, dup := p.names[l.Rule]; dup {
		p.fail(n, field, "rule name %q of %q collides with the one of %q; rename a descriptor", l.Rule, path, other)
		return false
	}
	if _, err := config.CheckRule(l.configRule()); err != nil {
		p.fail(n, field, "as a tokenmesh rule: %v", err)
		return false
	}
	p.names[l.Rule] = path
	return true
}
