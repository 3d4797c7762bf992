package main

import (
	"bytes"
	"html"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sim --out writes report.html; the same flags and seed give the same
// bytes, and the page holds the command line that reproduces it, in the
// order given, without the flags that change no output.
func TestSimOutHTMLReproducible(t *testing.T) {
	dir := t.TempDir()
	args := []string{"sim", "--trace", filepath.Join("..", "..", "examples", "access.log"), "--nodes", "10",
		"--strategies", "central,local,owner", "--progress", "never", "--param", "owner.hold=2ms",
		"--scenario", filepath.Join("..", "..", "examples", "scenarios", "crash-hot-owner-access-log.yaml"),
		"--parallel", "2", "--param", "owner.timeout=1s", "--out", dir, "--seed", "3"}
	var first []byte
	for i := range 2 {
		_, errOut, code := tokenmesh(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		if !strings.Contains(errOut, filepath.Join(dir, "report.html")) {
			t.Errorf("stderr does not name report.html: %s", errOut)
		}
		page, err := os.ReadFile(filepath.Join(dir, "report.html"))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = page
		} else if !bytes.Equal(page, first) {
			t.Error("the same flags and seed gave a different report.html")
		}
	}
	want := "tokenmesh sim --trace ../../examples/access.log --nodes 10 --strategies central,local,owner" +
		" --param owner.hold=2ms --param owner.timeout=1s" +
		" --scenario ../../examples/scenarios/crash-hot-owner-access-log.yaml --out " + dir + " --seed 3"
	if !strings.Contains(html.UnescapeString(string(first)), `<code class="reproduce">`+want+"</code>") {
		t.Errorf("report.html lacks the command %q", want)
	}
}
