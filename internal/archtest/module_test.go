package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// modulePath is the import path of the module under test.
const modulePath = "github.com/tokenmesh/tokenmesh"

// pkg is one package of the module as `go list -json` describes it,
// reduced to what the rules read.
type pkg struct {
	ImportPath string
	Dir        string
	GoFiles    []string // non-test files, build constraints applied
	CgoFiles   []string
	Imports    []string // of GoFiles and CgoFiles only: tests may import anything
	Error      *struct{ Err string }
}

// rel is p's path within the module: "strategy/owner"; "." for the root.
func (p *pkg) rel() string { return relPath(p.ImportPath) }

// files are p's non-test Go files.
func (p *pkg) files() []string { return append(slices.Clone(p.GoFiles), p.CgoFiles...) }

// relPath is the module-relative form of an import path of the module;
// other paths are returned unchanged.
func relPath(importPath string) string {
	if importPath == modulePath {
		return "."
	}
	return strings.TrimPrefix(importPath, modulePath+"/")
}

// inModule reports whether importPath is a package of the module.
func inModule(importPath string) bool {
	return importPath == modulePath || strings.HasPrefix(importPath, modulePath+"/")
}

// under reports whether the module-relative path rel is dir or a package
// below it.
func under(rel, dir string) bool { return rel == dir || strings.HasPrefix(rel, dir+"/") }

var (
	loadOnce sync.Once
	loaded   []*pkg
	loadErr  error
)

// packages lists the module's packages (`go list -e -json ./...` at the
// module root; cached for the test binary), sorted by import path, with
// their module-relative imports. A package that does not load fails the
// test.
func packages(t *testing.T) []*pkg {
	t.Helper()
	loadOnce.Do(func() { loaded, loadErr = goList(moduleRoot(t)) })
	if loadErr != nil {
		t.Fatalf("go list: %v", loadErr)
	}
	return loaded
}

// goList runs go list in root and decodes its stream of packages.
func goList(root string) ([]*pkg, error) {
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Dir,GoFiles,CgoFiles,Imports,Error", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, errors.New(err.Error() + ": " + stderr.String())
	}
	var pkgs []*pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		p := new(pkg)
		if err := dec.Decode(p); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		if p.Error != nil {
			return nil, errors.New(p.ImportPath + ": " + p.Error.Err)
		}
		pkgs = append(pkgs, p)
	}
	slices.SortFunc(pkgs, func(a, b *pkg) int { return strings.Compare(a.ImportPath, b.ImportPath) })
	return pkgs, nil
}

// moduleRoot is the directory of the module's go.mod (this package is two
// levels below it).
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	return root
}

// readDoc returns the text of the repository file rel ("docs/API.md").
func readDoc(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(moduleRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// importSites returns where p's non-test files import importPath, as
// "dir/file.go:line" relative to the module root (the package's path when
// no file is found: the import came from a cgo or generated file).
func importSites(t *testing.T, p *pkg, importPath string) []string {
	t.Helper()
	var sites []string
	fset := token.NewFileSet()
	for _, name := range p.files() {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, spec := range f.Imports {
			if path, _ := strconv.Unquote(spec.Path.Value); path == importPath {
				sites = append(sites, position(t, fset, spec.Pos()))
			}
		}
	}
	if len(sites) == 0 {
		sites = []string{p.rel()}
	}
	return sites
}

// position is pos as "dir/file.go:line", relative to the module root.
func position(t *testing.T, fset *token.FileSet, pos token.Pos) string {
	t.Helper()
	at := fset.Position(pos)
	name, err := filepath.Rel(moduleRoot(t), at.Filename)
	if err != nil {
		name = at.Filename
	}
	return filepath.ToSlash(name) + ":" + strconv.Itoa(at.Line)
}
