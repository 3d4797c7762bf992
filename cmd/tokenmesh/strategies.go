package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tokenmesh/tokenmesh/strategy"
	"github.com/tokenmesh/tokenmesh/strategy/all"
)

func newStrategiesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "strategies [NAME...]",
		Short: "List the coordination strategies and their parameters (type, unit, default, doc)",
		Long: `strategies prints, for each strategy (or only those named), what it is and a
table of its parameters from their declarations (strategy/all, Info.Params):
name, type (duration, int, float, bool, string, or the values of an enum),
unit, default and what it does. Defaults written as formulas depend on the
latency hint (node.latency_hint; sim's --latency) or on other parameters.

Give a parameter as --param STRATEGY.NAME=value to sim and replay, or as
NAME: value under a rule's params in the config file. Every strategy also
takes the generic partition (available | conserve). A value may contain a
comma unless NAME= follows it (that starts another pair).`,
		Example: `  tokenmesh strategies
  tokenmesh strategies owner lease`,
		RunE: func(cmd *cobra.Command, args []string) error {
			infos := all.List()
			if len(args) > 0 {
				infos = infos[:0]
				for _, a := range args {
					info, err := all.Lookup(a)
					if err != nil {
						return usageErr("%v", err)
					}
					infos = append(infos, info)
				}
			}
			return writeStrategies(cmd.OutOrStdout(), infos)
		},
	}
}

// writeStrategies writes one section per strategy: its name, summary and
// source, then a table of its declared parameters.
func writeStrategies(w io.Writer, infos []all.Info) error {
	for i, info := range infos {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s: %s (%s)\n", info.Name, info.Summary, info.Source)
		if len(info.Params) == 0 {
			fmt.Fprintf(w, "  no parameters besides the generic %s\n", strategy.PartitionParam)
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  PARAMETER\tTYPE\tUNIT\tDEFAULT\tDOC")
		for _, s := range info.Params {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", s.Name, s.TypeText(), dash(s.Unit), dash(s.Default), s.Doc)
		}
		p := strategy.PartitionSpec
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", p.Name, p.TypeText(), "-", p.Default, p.Doc)
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func dash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}
