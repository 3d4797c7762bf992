package topology

import (
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	got, err := Parse(" eu:10, us:10 ,ap-south_1:3")
	if err != nil {
		t.Fatal(err)
	}
	want := []Region{{"eu", 10}, {"us", 10}, {"ap-south_1", 3}}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if Nodes(got) != 23 || Format(got) != "eu:10,us:10,ap-south_1:3" || Index(got, "us") != 1 || Index(got, "mars") != -1 {
		t.Fatalf("Nodes %d Format %q", Nodes(got), Format(got))
	}
	for _, tc := range []struct{ in, want string }{
		{"", "no region"},
		{"eu:10,,us:1", "empty entry"},
		{"eu", `"eu" has no node count`},
		{"eu:0", "region eu has 0 nodes; a region needs at least 1"},
		{"eu:-3", "region eu has -3 nodes"},
		{"eu:x", `node count "x" is not a whole number`},
		{"eu:10,eu:5", "region eu is given twice"},
		{":3", "region name is empty"},
		{"e.u:3", `"e.u" has '.'`},
		{"eu:1000000", "more than 100000"},
	} {
		_, err := Parse(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "want NAME:NODES") {
			t.Errorf("Parse(%q): %v, want an error with %q", tc.in, err, tc.want)
		}
	}
}

func TestNodeIDAndOf(t *testing.T) {
	if id := NodeID("eu", 12); id != "eu.n12" || Of(id) != "eu" {
		t.Fatalf("NodeID %q, Of %q", id, Of(id))
	}
	if Of("n3") != "" {
		t.Fatal("a name without a region has one")
	}
}

// Parse never panics; what it accepts prints back to itself and has at
// least one node per region, distinct valid names.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"eu:10,us:10,ap:10", "eu:1", "", "eu:0", "a:1,a:2", "x:99999999999999999999", " eu : 3 ,us:4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rs, err := Parse(s)
		if err != nil {
			return
		}
		again, err := Parse(Format(rs))
		if err != nil || !slices.Equal(again, rs) {
			t.Fatalf("%q -> %v -> %q -> %v, %v", s, rs, Format(rs), again, err)
		}
		seen := map[string]bool{}
		for _, r := range rs {
			if r.Nodes < 1 || r.Nodes > MaxRegionNodes || CheckName(r.Name) != nil || seen[r.Name] {
				t.Fatalf("%q: accepted %v", s, rs)
			}
			seen[r.Name] = true
		}
	})
}
