package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Strategies simulated in parallel give the report of the sequential run,
// byte for byte: JSON, table and report.md, with faults, at several widths.
func TestSimParallelSameOutput(t *testing.T) {
	scenario := filepath.Join(t.TempDir(), "faults.yaml")
	faults := "detection: 1s\nreconnect_interval: 2s\nevents:\n" +
		"  - at: 5s\n    partition: [[n0], [n1, n2]]\n  - at: 8s\n    crash: [n1]\n" +
		"  - at: 12s\n    heal: true\n  - at: 14s\n    restart: [n1]\n"
	if err := os.WriteFile(scenario, []byte(faults), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, extra := range [][]string{
		{"--nodes", "5", "--json"},
		{"--nodes", "3", "--scenario", scenario, "--loss", "0.05"},
	} {
		var want, wantMD string
		for _, par := range []string{"1", "2", "7"} {
			dir := t.TempDir()
			args := append([]string{"sim", "--workload", "mix:duration=20s", "--strategies", "all",
				"--parallel", par, "--progress", "always", "--out", dir}, extra...)
			out, errOut, code := tokenmesh(t, args...)
			if code != 0 {
				t.Fatalf("%v: exit %d: %s", args, code, errOut)
			}
			md, err := os.ReadFile(filepath.Join(dir, "report.md"))
			if err != nil {
				t.Fatal(err)
			}
			if par == "1" {
				want, wantMD = out, string(md)
				continue
			}
			if out != want {
				t.Errorf("%v: output differs from --parallel 1:\n%s\nwant:\n%s", args, out, want)
			}
			if string(md) != wantMD {
				t.Errorf("%v: report.md differs from --parallel 1", args)
			}
		}
	}
	if _, errOut, code := tokenmesh(t, "sim", "--parallel", "-1"); code == 0 {
		t.Error("--parallel -1 accepted")
	} else if !strings.Contains(errOut, "--parallel") {
		t.Errorf("error does not name --parallel: %s", errOut)
	}
}
