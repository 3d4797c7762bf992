package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The layering rules of docs/ARCHITECTURE.md ("The contract", "Package
// map"). Each failure names the file and line, the import or call, and
// the rule it breaks.

// drivers are the packages that drive strategies: the simulator and the
// live runtime. A package that imports one, directly or not, is built on
// a driver (limiter, server, daemon, rlqs, envoyrls, eval, cmd/..., ...).
var drivers = []string{"sim", "cluster"}

// stateMachines are the packages (with everything below them) whose code
// is a pure function of its inputs: no clock, no sleeping or timers, no
// goroutines. Time comes in as an argument.
var stateMachines = []string{"strategy", "bucket", "rendezvous", "rlqs/envoymodel"}

// clockFuncs are the functions of package time that read the wall clock,
// sleep or start timers.
var clockFuncs = []string{"Now", "Since", "Until", "Sleep", "After", "AfterFunc", "NewTimer", "NewTicker", "Tick"}

// liveRuntime are the top packages of the live runtime (a node and its
// servers, and the RLQS service plugged into it): what they link is a
// production node, and it links no simulator.
var liveRuntime = []string{"daemon", "rlqs"}

// graph is the module's non-test import graph, by module-relative path.
type graph map[string]*pkg

// moduleGraph indexes the module's packages by module-relative path.
func moduleGraph(t *testing.T) graph {
	t.Helper()
	g := graph{}
	for _, p := range packages(t) {
		g[p.rel()] = p
	}
	return g
}

// moduleImports are p's imports that are packages of the module,
// module-relative.
func (p *pkg) moduleImports() []string {
	var out []string
	for _, imp := range p.Imports {
		if inModule(imp) {
			out = append(out, relPath(imp))
		}
	}
	return out
}

// pathTo returns the shortest import chain from the package from to a
// package for which hit is true ("config -> cluster"), or "" when there is
// none.
func (g graph) pathTo(from string, hit func(string) bool) string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if hit(cur) {
			chain := []string{cur}
			for p := prev[cur]; p != ""; p = prev[p] {
				chain = append(chain, p)
			}
			slices.Reverse(chain)
			return strings.Join(chain, " -> ")
		}
		if p := g[cur]; p != nil {
			for _, imp := range p.moduleImports() {
				if _, seen := prev[imp]; !seen {
					prev[imp] = cur
					queue = append(queue, imp)
				}
			}
		}
	}
	return ""
}

// isDriver reports whether rel is under one of drivers.
func isDriver(rel string) bool {
	return slices.ContainsFunc(drivers, func(d string) bool { return under(rel, d) })
}

// isStrategy reports whether rel is one strategy's package: strategy/NAME
// other than the interpreter (host), the registry and the shared
// helpers (internal/...).
func isStrategy(rel string) bool {
	name, ok := strings.CutPrefix(rel, "strategy/")
	if !ok || strings.Contains(name, "/") {
		return false
	}
	return name != "host" && name != "registry" && name != "internal"
}

// Nothing under strategy/ imports a driver (sim, cluster) or a package
// built on one: a strategy is a state machine that any driver can run.
func TestStrategiesImportNoDriver(t *testing.T) {
	g := moduleGraph(t)
	for _, p := range packages(t) {
		if !under(p.rel(), "strategy") {
			continue
		}
		for _, imp := range p.moduleImports() {
			if under(imp, "strategy") {
				continue // checked as a package of its own
			}
			chain := g.pathTo(imp, isDriver)
			if chain == "" {
				continue
			}
			what := "a driver"
			if chain != imp {
				what = "built on a driver: " + chain
			}
			for _, at := range importSites(t, p, modulePath+"/"+imp) {
				t.Errorf("%s: imports %s (%s): nothing under strategy/ imports a driver (sim, cluster) or a package built on one (docs/ARCHITECTURE.md, \"Package map\")",
					at, imp, what)
			}
		}
	}
}

// No strategy imports another strategy's package: shared code goes to
// strategy/internal/...; only the registry (strategy/registry) imports them
// all.
func TestNoStrategyImportsAnother(t *testing.T) {
	for _, p := range packages(t) {
		if !isStrategy(p.rel()) {
			continue
		}
		for _, imp := range p.moduleImports() {
			if isStrategy(imp) {
				for _, at := range importSites(t, p, modulePath+"/"+imp) {
					t.Errorf("%s: strategy %s imports strategy %s: no strategy imports another; move what they share to strategy/internal/... (docs/ARCHITECTURE.md, \"Package map\")",
						at, p.rel(), imp)
				}
			}
		}
	}
}

// The state machines (everything under strategy/, bucket, rendezvous,
// rlqs/envoymodel) read no clock, do not sleep or set timers, and start no
// goroutine, outside their tests: the driver passes the time in, so the
// simulator and the live node run the same code.
func TestStateMachinesReadNoClock(t *testing.T) {
	for _, p := range packages(t) {
		if !slices.ContainsFunc(stateMachines, func(s string) bool { return under(p.rel(), s) }) {
			continue
		}
		for _, name := range p.files() {
			for _, v := range clockUses(t, filepath.Join(p.Dir, name)) {
				t.Errorf("%s: %s: the state machines (%s) read no clock, sleep, set no timer and start no goroutine outside tests; take the time as an argument (docs/ARCHITECTURE.md, \"The contract\")",
					v.at, v.what, strings.Join(stateMachines, ", "))
			}
		}
	}
}

// clockUse is one forbidden use in a file.
type clockUse struct{ at, what string }

// clockUses parses file and returns its go statements and its uses of
// package time's clockFuncs (called or not), under whatever name the file
// imports time as; a dot import of time counts as one.
func clockUses(t *testing.T, file string) []clockUse {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var out []clockUse
	timeName := ""
	for _, spec := range f.Imports {
		if path, _ := strconv.Unquote(spec.Path.Value); path != "time" {
			continue
		}
		timeName = "time"
		if spec.Name != nil {
			timeName = spec.Name.Name
		}
		if timeName == "." {
			out = append(out, clockUse{position(t, fset, spec.Pos()), "a dot import of package time"})
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			out = append(out, clockUse{position(t, fset, n.Pos()), "a go statement"})
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok && timeName != "" && x.Name == timeName && slices.Contains(clockFuncs, n.Sel.Name) {
				out = append(out, clockUse{position(t, fset, n.Pos()), "time." + n.Sel.Name})
			}
		}
		return true
	})
	return out
}

// The live runtime (daemon and what it wires, and rlqs) links no
// simulator: the two drivers share the contract and strategy/host, not
// code of their own.
func TestLiveRuntimeLinksNoSimulator(t *testing.T) {
	g := moduleGraph(t)
	reported := map[string]bool{}
	for _, top := range liveRuntime {
		if g[top] == nil {
			t.Errorf("the live runtime's package %s does not exist: update liveRuntime in this test", top)
			continue
		}
		chain := g.pathTo(top, func(rel string) bool { return under(rel, "sim") })
		if chain == "" {
			continue
		}
		hops := strings.Split(chain, " -> ")
		from, to := hops[len(hops)-2], hops[len(hops)-1]
		for _, at := range importSites(t, g[from], modulePath+"/"+to) {
			if !reported[at] {
				reported[at] = true
				t.Errorf("%s: imports %s (%s): the live runtime links no simulator (docs/ARCHITECTURE.md, \"Two drivers\")", at, to, chain)
			}
		}
	}
}

// mapLayer is one line of the package map: the packages it names, top
// line first.
type mapLayer struct {
	line  int      // in docs/ARCHITECTURE.md, from 1
	text  string   // the line, trimmed
	items []string // module-relative paths and "dir/..." patterns
}

// The package map of docs/ARCHITECTURE.md lists every package of the
// module (test-only packages aside) on one line, top to bottom, and a
// package imports only packages on lines below its own: nothing imports
// a package above it or beside it on its line.
func TestPackageMap(t *testing.T) {
	layers := packageMap(t)
	// Place every package on its line: an exact name wins over the longest
	// "dir/..." pattern.
	rank := map[string]int{}
	for _, p := range packages(t) {
		if len(p.files()) == 0 {
			continue // only tests: nothing it imports is layered
		}
		if r, ok := place(t, layers, p.rel()); ok {
			rank[p.rel()] = r
		} else {
			t.Errorf("%s is not on the package map of docs/ARCHITECTURE.md: add it to the line of the packages it sits beside (it imports %v)",
				p.rel(), p.moduleImports())
		}
	}
	// Every name on the map is a package.
	for _, l := range layers {
		for _, item := range l.items {
			if !slices.ContainsFunc(packages(t), func(p *pkg) bool { return matches(item, p.rel()) }) {
				t.Errorf("docs/ARCHITECTURE.md:%d: the package map names %s, which is not a package of the module (%q)", l.line, item, l.text)
			}
		}
	}
	for _, p := range packages(t) {
		from, ok := rank[p.rel()]
		if !ok {
			continue
		}
		for _, imp := range p.moduleImports() {
			to, ok := rank[imp]
			if !ok || to > from {
				continue
			}
			where := fmt.Sprintf("above it (%s is on docs/ARCHITECTURE.md:%d, %s on :%d)", imp, layers[to].line, p.rel(), layers[from].line)
			if to == from {
				where = fmt.Sprintf("beside it (both on docs/ARCHITECTURE.md:%d)", layers[to].line)
			}
			for _, at := range importSites(t, p, modulePath+"/"+imp) {
				t.Errorf("%s: %s imports %s, which the package map puts %s: a package imports only packages on lines below its own (move one of them on the map, or the code)",
					at, p.rel(), imp, where)
			}
		}
	}
}

// place returns the index of the layer that names rel: exactly, or else by
// its longest "dir/..." pattern. A package named on two lines fails the
// test.
func place(t *testing.T, layers []mapLayer, rel string) (int, bool) {
	t.Helper()
	exact, best, bestLen := -1, -1, -1
	for i, l := range layers {
		for _, item := range l.items {
			switch {
			case item == rel:
				if exact >= 0 {
					t.Errorf("docs/ARCHITECTURE.md:%d and :%d: the package map names %s twice", layers[exact].line, l.line, rel)
				}
				exact = i
			case matches(item, rel) && len(item) > bestLen:
				best, bestLen = i, len(item)
			}
		}
	}
	if exact >= 0 {
		return exact, true
	}
	return best, best >= 0
}

// matches reports whether the map's item (a path or "dir/...") names rel.
func matches(item, rel string) bool {
	if dir, ok := strings.CutSuffix(item, "/..."); ok {
		return strings.HasPrefix(rel, dir+"/")
	}
	return item == rel
}

// mapItemRE is what the map may name: a module-relative package path or a
// "dir/..." pattern.
var mapItemRE = regexp.MustCompile(`^[a-z0-9_]+(/[a-z0-9_]+)*(/\.\.\.)?$`)

// mapGapRE separates a layer's packages from what they are.
var mapGapRE = regexp.MustCompile(`\s{2,}`)

// packageMap parses the first fenced block after the "## Package map"
// heading of docs/ARCHITECTURE.md: one layer per non-blank line, top
// first, each line the layer's packages (comma-separated, "dir/{a, b}"
// for several under one directory, "dir/..." for all below it) and, after
// two or more spaces, what they are.
func packageMap(t *testing.T) []mapLayer {
	t.Helper()
	lines := strings.Split(readDoc(t, "docs/ARCHITECTURE.md"), "\n")
	start := slices.Index(lines, "## Package map")
	if start < 0 {
		t.Fatal(`docs/ARCHITECTURE.md has no "## Package map" heading`)
	}
	var layers []mapLayer
	inBlock := false
	for i := start + 1; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if strings.HasPrefix(line, "```") {
			if inBlock {
				return layers
			}
			inBlock = true
			continue
		}
		if !inBlock || line == "" {
			continue
		}
		names := mapGapRE.Split(line, 2)[0]
		l := mapLayer{line: i + 1, text: strings.Join(strings.Fields(line), " ")}
		for _, item := range expandBraces(names) {
			if !mapItemRE.MatchString(item) {
				t.Fatalf("docs/ARCHITECTURE.md:%d: %q in the package map is not a package path (a layer's line is its packages, comma-separated, then two spaces and what they are)", i+1, item)
			}
			l.items = append(l.items, item)
		}
		layers = append(layers, l)
	}
	t.Fatal("docs/ARCHITECTURE.md: the package map's fenced block (after \"## Package map\") is missing or not closed")
	return nil
}

// expandBraces splits a comma-separated list, expanding "dir/{a, b}" to
// "dir/a", "dir/b".
func expandBraces(list string) []string {
	var out []string
	depth, startAt := 0, 0
	flush := func(item string) {
		item = strings.TrimSpace(item)
		prefix, rest, ok := strings.Cut(item, "{")
		if !ok {
			out = append(out, item)
			return
		}
		for _, name := range strings.Split(strings.TrimSuffix(rest, "}"), ",") {
			out = append(out, prefix+strings.TrimSpace(name))
		}
	}
	for i, c := range list {
		switch c {
		case '{':
			depth++
		case '}':
			depth--
		case ',':
			if depth == 0 {
				flush(list[startAt:i])
				startAt = i + 1
			}
		}
	}
	flush(list[startAt:])
	return out
}
