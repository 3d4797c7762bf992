package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	old := version
	defer func() { version = old }()
	version = "v9.8.7"
	cmd := newVersionCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs(nil)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.HasPrefix(got, "tokenmesh v9.8.7 (revision ") || !strings.Contains(got, "go1.") {
		t.Fatalf("version printed %q", got)
	}
	version = ""
	if bi := readBuildInfo(); bi.Version == "" {
		t.Fatal("an unset version must read as the module version or dev")
	}
}
