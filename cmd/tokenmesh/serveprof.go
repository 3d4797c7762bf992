package main

import (
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// cpuProfileFlag is serve's --cpuprofile.
const cpuProfileFlag = "cpuprofile"

// pidPlaceholder in --cpuprofile's path is replaced by the process id, so
// that several nodes started with the same flags (bench --spawn) write
// files of their own.
const pidPlaceholder = "{pid}"

// addCPUProfileFlag defines --cpuprofile on cmd.
func addCPUProfileFlag(cmd *cobra.Command, path *string) {
	cmd.Flags().StringVar(path, cpuProfileFlag, "",
		"profiling: write a CPU profile of the whole run to this file (go tool pprof), "+
			"finished when serve stops; "+pidPlaceholder+" in the path is replaced by the process id")
}

// startCPUProfile starts the CPU profile of --cpuprofile (path, "" for
// none) and returns the function that stops it and closes the file.
// Errors: the file cannot be created, a profile is already running.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	path = strings.ReplaceAll(path, pidPlaceholder, strconv.Itoa(os.Getpid()))
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", cpuProfileFlag, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("--%s: %w", cpuProfileFlag, err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}
