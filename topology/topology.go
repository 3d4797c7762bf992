// Package topology describes a cluster that spans regions : the
// regions and their node counts, as `tokenmesh sim --regions eu:10,us:10`
// gives them, and the convention by which a node's region travels in its
// strategy.NodeID.
//
// The region is in the node's name. A strategy sees its peers only as
// strategy.NodeIDs (Config.Self, Config.Members, SetMembers), so the
// simulator names the nodes of a run with regions "<region>.n<i>" (i the
// node's index in the whole cluster: eu.n0 .. eu.n9, us.n10 .. us.n19)
// and a strategy that wants to know where a peer is reads it with Of,
// without any new input. Without regions nodes keep their names n0, n1,
// ... and Of returns "". No strategy reads regions yet.
//
// Region names are letters, digits, '_' and '-' (no '.', which ends the
// region in a node name), at most MaxNameBytes bytes.
package topology

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tokenmesh/tokenmesh/strategy"
)

// Region is one region of a cluster and its node count.
type Region struct {
	Name  string
	Nodes int
}

// Bounds of a region list.
const (
	MaxNameBytes = 32
	// MaxRegionNodes bounds one region's node count (and MaxRegions the
	// count of regions), so that the sum cannot overflow.
	MaxRegionNodes = 100_000
	MaxRegions     = 64
)

// Parse reads "eu:10,us:10,ap:10": comma-separated NAME:NODES, in order.
// Errors quote the text and say what is wrong: an empty list or entry, a
// missing or bad count, zero nodes, a bad or repeated name.
func Parse(s string) ([]Region, error) {
	bad := func(format string, a ...any) ([]Region, error) {
		return nil, fmt.Errorf("regions %q: %s (want NAME:NODES,..., e.g. eu:10,us:10,ap:10)", s, fmt.Sprintf(format, a...))
	}
	if strings.TrimSpace(s) == "" {
		return bad("no region")
	}
	var out []Region
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		name, count, ok := strings.Cut(strings.TrimSpace(part), ":")
		name, count = strings.TrimSpace(name), strings.TrimSpace(count)
		switch {
		case part == "" || strings.TrimSpace(part) == "":
			return bad("empty entry")
		case !ok:
			return bad("%q has no node count", part)
		}
		if err := CheckName(name); err != nil {
			return bad("region name %v", err)
		}
		if seen[name] {
			return bad("region %s is given twice", name)
		}
		seen[name] = true
		n, err := strconv.Atoi(count)
		switch {
		case err != nil:
			return bad("region %s: node count %q is not a whole number", name, count)
		case n < 1:
			return bad("region %s has %d nodes; a region needs at least 1", name, n)
		case n > MaxRegionNodes:
			return bad("region %s: %d nodes is more than %d", name, n, MaxRegionNodes)
		}
		out = append(out, Region{Name: name, Nodes: n})
		if len(out) > MaxRegions {
			return bad("more than %d regions", MaxRegions)
		}
	}
	return out, nil
}

// CheckName checks a region name: not empty, at most MaxNameBytes bytes of
// letters, digits, '_' and '-'.
func CheckName(name string) error {
	if name == "" {
		return fmt.Errorf("is empty")
	}
	if len(name) > MaxNameBytes {
		return fmt.Errorf("%q is longer than %d bytes", name, MaxNameBytes)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("%q has %q (use letters, digits, '_', '-')", name, c)
		}
	}
	return nil
}

// Format prints regions as Parse reads them ("eu:10,us:10").
func Format(regions []Region) string {
	parts := make([]string, len(regions))
	for i, r := range regions {
		parts[i] = r.Name + ":" + strconv.Itoa(r.Nodes)
	}
	return strings.Join(parts, ",")
}

// Nodes is the sum of the regions' node counts.
func Nodes(regions []Region) int {
	n := 0
	for _, r := range regions {
		n += r.Nodes
	}
	return n
}

// Index returns the index of the region named name, or -1.
func Index(regions []Region, name string) int {
	for i, r := range regions {
		if r.Name == name {
			return i
		}
	}
	return -1
}

// Names are the regions' names, in order.
func Names(regions []Region) []string {
	out := make([]string, len(regions))
	for i, r := range regions {
		out[i] = r.Name
	}
	return out
}

// NodeID is the name of the cluster's node i (from 0, over all regions)
// in region: "eu.n3".
func NodeID(region string, i int) strategy.NodeID {
	return strategy.NodeID(region + ".n" + strconv.Itoa(i))
}

// Of is the region of a node named by NodeID: the text before the first
// '.', or "" for a name without one (a cluster without regions).
func Of(id strategy.NodeID) string {
	region, _, ok := strings.Cut(string(id), ".")
	if !ok {
		return ""
	}
	return region
}
