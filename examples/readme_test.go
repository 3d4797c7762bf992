// Package examples holds the tests of the repository's shipped examples
// and of the README's code: the README's library snippets build as
// written, the local cluster's node configs load, and the Envoy example's
// files are what Envoy and `tokenmesh serve --envoy-config` read.
package examples

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/tokenmesh/tokenmesh/strategy/registry"
)

// snippetMarker precedes each README code block that must build as written.
const snippetMarker = "<!-- readme-snippet: builds"

// readmeSnippets returns the fenced Go blocks that follow a snippetMarker
// line in readme, in order.
func readmeSnippets(t *testing.T, readme string) []string {
	t.Helper()
	var out []string
	lines := strings.Split(readme, "\n")
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], snippetMarker) {
			continue
		}
		if i+1 >= len(lines) || lines[i+1] != "```go" {
			t.Fatalf("README.md:%d: the snippet marker is not followed by a ```go line", i+1)
		}
		var b strings.Builder
		j := i + 2
		for ; j < len(lines) && lines[j] != "```"; j++ {
			b.WriteString(lines[j] + "\n")
		}
		if j == len(lines) {
			t.Fatalf("README.md:%d: the snippet's ```go block is not closed", i+2)
		}
		out = append(out, b.String())
		i = j
	}
	return out
}

// repoRoot is the module's root: the parent of this package's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// goVersion is the go directive of the repository's go.mod.
func goVersion(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	return string(m[1])
}

// The README's library snippets build and vet as written, each as the
// main package of a module of its own that imports the repository through a
// Go workspace (go.work "use"s the repository): no network, no module
// cache beyond the repository's own dependencies (whose go.mod files the
// test fetches first). The limiter snippet is
// run too and must print what its comments say.
func TestReadmeLibrarySnippetsBuild(t *testing.T) {
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	snippets := readmeSnippets(t, string(readme))
	if len(snippets) < 2 {
		t.Fatalf("README.md has %d snippets marked %q, want the limiter and the httplimit one", len(snippets), snippetMarker)
	}
	// A workspace loads the repository's whole module graph, every module
	// go.mod lists included (an indirect requirement no package imports
	// among them), which building the repository never fetches: download
	// them now, through the environment's module proxy (or from the
	// cache), before the offline build below.
	download := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "mod", "download")
	download.Dir = root
	if out, err := download.CombinedOutput(); err != nil {
		t.Fatalf("go mod download (the repository's modules, for the offline build): %v\n%s", err, out)
	}
	dir := t.TempDir()
	ver := goVersion(t, root)
	work := fmt.Sprintf("go %s\n\nuse (\n\t%s\n\t./snippets\n)\n", ver, root)
	if err := os.WriteFile(filepath.Join(dir, "go.work"), []byte(work), 0o644); err != nil {
		t.Fatal(err)
	}
	mod := filepath.Join(dir, "snippets")
	if err := os.MkdirAll(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module readmesnippets\n\ngo "+ver+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, s := range snippets {
		pkg := filepath.Join(mod, fmt.Sprintf("snippet%d", i+1))
		if err := os.MkdirAll(pkg, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkg, "main.go"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gocmd := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), args...)
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(dir, "go.work"), "GOPROXY=off", "GOFLAGS=-mod=readonly")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s (snippets in %s): %v\n%s", strings.Join(args, " "), mod, err, out)
		}
		return string(out)
	}
	gocmd("vet", "./...")
	bin := filepath.Join(dir, "bin") + string(filepath.Separator)
	gocmd("build", "-o", bin, "./...")

	// The limiter snippet (the first) runs on its own and prints what its
	// comments promise.
	out, err := exec.Command(filepath.Join(bin, "snippet1")).CombinedOutput()
	if err != nil {
		t.Fatalf("the limiter snippet: %v\n%s", err, out)
	}
	if got, want := string(out), "true\n<nil>\nfalse <nil>\n"; got != want {
		t.Errorf("the limiter snippet printed %q, want %q (its comments say so)", got, want)
	}
}

// The README's strategy table lists every strategy of the registry (what
// `tokenmesh strategies` prints).
func TestReadmeStrategyTableComplete(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range registry.Names() {
		if !strings.Contains(string(readme), "\n| `"+name+"` |") {
			t.Errorf("README.md's strategy table has no row for %s", name)
		}
	}
}
