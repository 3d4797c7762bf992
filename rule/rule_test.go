package rule

import (
	"errors"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/tokenmesh/tokenmesh/bucket"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// TestFormatRateRoundTrip: ParseRate(FormatRate(r)) is r in lowest terms,
// for any valid rate.
func TestFormatRateRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := bucket.Rate{Tokens: rapid.Int64Range(1, 1e6).Draw(t, "tokens"),
			Per: time.Duration(rapid.Int64Range(1, int64(1e6*time.Second)).Draw(t, "per"))}.Reduced()
		if r.Validate() != nil || r.PerSec() > 1e12 {
			t.Skip("not a valid rate")
		}
		got, err := ParseRate(FormatRate(r))
		if err != nil {
			t.Fatalf("ParseRate(%q): %v", FormatRate(r), err)
		}
		if got != r {
			t.Fatalf("round trip of %v via %q: %v", r, FormatRate(r), got)
		}
	})
}

func TestValidateNamesTheField(t *testing.T) {
	ok := Rule{Name: "api", Rate: MustRate("10/s"), Burst: 5}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid rule (default strategy): %v", err)
	}
	cases := []struct {
		name  string
		edit  func(*Rule)
		field string
	}{
		{"empty name", func(r *Rule) { r.Name = "" }, "name"},
		{"bad name", func(r *Rule) { r.Name = "a b" }, "name"},
		{"zero rate", func(r *Rule) { r.Rate = bucket.Rate{} }, "rate"},
		{"zero burst", func(r *Rule) { r.Burst = 0 }, "burst"},
		{"unknown strategy", func(r *Rule) { r.Strategy = "nope" }, "strategy"},
		{"unknown param", func(r *Rule) { r.Params = []string{"bogus=1"} }, "params"},
		{"bad param type", func(r *Rule) { r.Params = []string{"hold=fast"} }, "params.hold"},
		{"param without =", func(r *Rule) { r.Params = []string{"hold"} }, "params"},
		{"param out of bounds", func(r *Rule) { r.Strategy, r.Params = "gcounter", []string{"gossip=0s"} }, "params"},
		{"partition disagrees", func(r *Rule) {
			r.Strategy, r.Partition, r.Params = "static", strategy.PartitionConserve, []string{"partition=available"}
		}, "partition"},
		{"conserve unsupported", func(r *Rule) { r.Strategy, r.Partition = "local", strategy.PartitionConserve }, "partition"},
		{"bad partition mode", func(r *Rule) { r.Partition = 9 }, "partition"},
	}
	for _, c := range cases {
		r := ok
		c.edit(&r)
		err := r.Validate()
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%s: %v, want a *FieldError", c.name, err)
			continue
		}
		if fe.Field != c.field {
			t.Errorf("%s: field %q (%v), want %q", c.name, fe.Field, err, c.field)
		}
	}
}

func TestPerSecondAndPairs(t *testing.T) {
	r, err := PerSecond("api", 2.5, 3)
	if err != nil || r.Rate != MustRate("5/2s") || r.Strategy != DefaultStrategy || r.Validate() != nil {
		t.Fatalf("PerSecond(2.5): %+v, %v", r, err)
	}
	if _, err := PerSecond("api", -1, 3); !errors.Is(err, ErrRate) {
		t.Fatalf("PerSecond(-1): %v, want ErrRate", err)
	}
	if got := Pairs(map[string]string{"b": "2", "a": "x,y"}); len(got) != 2 || got[0] != "a=x,y" || got[1] != "b=2" {
		t.Fatalf("Pairs: %q", got)
	}
	if Pairs(nil) != nil {
		t.Fatal("Pairs(nil) is not nil")
	}
	if DefaultBurst(MustRate("2.5")) != 3 || DefaultBurst(MustRate("1/h")) != 1 {
		t.Fatal("DefaultBurst")
	}
}
