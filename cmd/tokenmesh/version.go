package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/tokenmesh/tokenmesh/server"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3"
// (Dockerfile, make image-binary); otherwise it is the module version Go
// recorded, or "dev".
var version = ""

// buildInfo is what `tokenmesh version` prints: what the build_info
// metric carries (the version, the VCS revision, the Go version) and
// whether the tree was modified.
type buildInfo struct {
	server.BuildInfo
	Modified bool
}

func readBuildInfo() buildInfo {
	bi := buildInfo{BuildInfo: server.BuildInfo{Version: version, GoVersion: runtime.Version()}}
	if info, ok := debug.ReadBuildInfo(); ok {
		if bi.Version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			bi.Version = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				bi.Revision = s.Value
			case "vcs.modified":
				bi.Modified = s.Value == "true"
			}
		}
	}
	if bi.Version == "" {
		bi.Version = "dev"
	}
	return bi
}

func (b buildInfo) String() string {
	rev := b.Revision
	if rev == "" {
		rev = "unknown"
	} else if len(rev) > 12 {
		rev = rev[:12]
	}
	if b.Modified {
		rev += "+modified"
	}
	return fmt.Sprintf("tokenmesh %s (revision %s, %s)", b.Version, rev, b.GoVersion)
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, VCS revision and Go version of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), readBuildInfo())
			return nil
		},
	}
}
