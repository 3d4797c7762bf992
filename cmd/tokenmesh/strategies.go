package main

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tokenmesh/tokenmesh/eval"
	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/registry"
)

func newStrategiesCmd() *cobra.Command {
	var wide bool
	cmd := &cobra.Command{
		Use:   "strategies [NAME...]",
		Short: "List the coordination strategies and their parameters (type, unit, default, doc)",
		Long: `strategies prints, for each strategy (or only those named), what it is and a
table of its parameters from their declarations (strategy/registry, Info.Params):
name, type (duration, int, float, bool, string, or the values of an enum),
unit, default and what it does. Defaults written as formulas depend on the
latency hint (node.latency_hint; sim's --latency) or on other parameters.

Give a parameter as --param STRATEGY.NAME=value to sim and replay, or as
NAME: value under a rule's params in the config file. Every strategy also
takes the generic partition (available | conserve). A value may contain a
comma unless NAME= follows it (that starts another pair).

A "restart:" line says whether the strategy's bucket levels survive a
restart of the node (kept in node.state_dir: the strategies that snapshot)
or start fresh. A "fast path (live):" line says which checks a live node
(serve, the embedded limiter) decides in the calling goroutine without a
hand-off to the node's event loop: tens of nanoseconds instead of about
1.5 us embedded (docs/PERFORMANCE.md); the simulator's results do not
depend on it.

The output fits 120 columns: a parameter's doc is wrapped under its DOC
column, or on the lines below the parameter when the other columns leave it
too little room; --wide prints every parameter on one line.`,
		Example: `  tokenmesh strategies
  tokenmesh strategies owner lease
  tokenmesh strategies --wide`,
		RunE: func(cmd *cobra.Command, args []string) error {
			infos := registry.List()
			if len(args) > 0 {
				infos = infos[:0]
				for _, a := range args {
					info, err := registry.Lookup(a)
					if err != nil {
						return usageErr("%v", err)
					}
					infos = append(infos, info)
				}
			}
			width := eval.DefaultWidth
			if wide {
				width = 0
			}
			return writeStrategies(cmd.OutOrStdout(), infos, width)
		},
	}
	cmd.Flags().BoolVar(&wide, "wide", false, "print every parameter on one line, however wide (default: fit 120 columns)")
	return cmd
}

// minDoc is the narrowest DOC column writeStrategies wraps a doc into;
// with less room the doc goes on the lines below its parameter.
const minDoc = 40

// writeStrategies writes one section per strategy: its name, summary and
// source, its restart and fast-path lines, then a table of its declared
// parameters and the generic partition (writeParams), every line within
// width columns (eval.Wrap; <= 0: one line per parameter, however wide).
func writeStrategies(w io.Writer, infos []registry.Info, width int) error {
	bw := bufio.NewWriter(w)
	for i, info := range infos {
		if i > 0 {
			fmt.Fprintln(bw)
		}
		for _, l := range eval.Wrap(fmt.Sprintf("%s: %s (%s)", info.Name, info.Summary, info.Source), width, "  ") {
			fmt.Fprintln(bw, l)
		}
		fmt.Fprintln(bw, restartLine(info))
		fmt.Fprintln(bw, fastPathLine(info))
		if len(info.Params) == 0 {
			fmt.Fprintf(bw, "  no parameters besides the generic %s\n", strategy.PartitionParam)
			continue
		}
		writeParams(bw, info, width)
	}
	return bw.Flush()
}

// writeParams writes info's parameter table (its declared parameters and
// the generic partition) within width columns (<= 0: one line per
// parameter): each doc wrapped under the DOC column, or on the lines below
// its parameter when the other columns leave it less than minDoc.
func writeParams(bw *bufio.Writer, info registry.Info, width int) {
	rows := [][]string{{"PARAMETER", "TYPE", "UNIT", "DEFAULT", "DOC"}}
	for _, s := range info.Params {
		rows = append(rows, []string{s.Name, s.TypeText(), dash(s.Unit), dash(s.Default), s.Doc})
	}
	p := strategy.PartitionSpec
	rows = append(rows, []string{p.Name, p.TypeText(), "-", p.Default, p.Doc})
	colW := make([]int, 4)
	for _, r := range rows {
		for c := range colW {
			colW[c] = max(colW[c], len(r[c]))
		}
	}
	docCol := 2 // the indent, then each column and 2 spaces
	for _, cw := range colW {
		docCol += cw + 2
	}
	below := width > 0 && width-docCol < minDoc
	for _, r := range rows {
		var line strings.Builder
		line.WriteString("  ")
		for c, cw := range colW {
			fmt.Fprintf(&line, "%-*s  ", cw, r[c])
		}
		if !below {
			for _, l := range eval.Wrap(line.String()+r[4], width, strings.Repeat(" ", docCol)) {
				fmt.Fprintln(bw, strings.TrimRight(l, " "))
			}
			continue
		}
		fmt.Fprintln(bw, strings.TrimRight(line.String(), " "))
		if r[4] != "DOC" {
			for _, l := range eval.Wrap("      "+r[4], width, "      ") {
				fmt.Fprintln(bw, l)
			}
		}
	}
}

// restartLine says what a restart does to the strategy's state: kept
// when it snapshots (registry.Info.Snapshots), else lost.
func restartLine(info registry.Info) string {
	if info.Snapshots() {
		return "  restart: keeps its bucket levels (snapshotted in node.state_dir)"
	}
	return "  restart: starts fresh (not snapshotted)"
}

// fastPathLine says what the live node decides in the caller's goroutine
// for the strategy, off its event loop (registry.Info.FastPath).
func fastPathLine(info registry.Info) string {
	f := info.FastPath()
	switch {
	case f.Buckets:
		return "  fast path (live): lends the key's whole bucket; every check decided in the caller's goroutine"
	case f.Allowances && f.Refusals:
		return "  fast path (live): admits from tokens the node holds, refuses in refusal windows: in the caller's goroutine"
	case f.Allowances:
		return "  fast path (live): admits from tokens the node holds, in the caller's goroutine"
	}
	return "  fast path (live): none; every check decided in the node's event loop"
}

func dash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}
