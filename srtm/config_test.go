package srtm

import (
	"os"
	"strings"
	"testing"
)

func TestLoadExamples(t *testing.T) {
	b, err := LoadBrokers("testdata/brokers.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 4 || b[0] != (Broker{Name: "broker-1", MCap: 10000, Load: 7500}) {
		t.Errorf("brokers %+v", b)
	}
	tp, err := LoadTopic("testdata/topic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if tp.Name != "sensors" || tp.Rate != 12000 || tp.Burst != 120 || tp.SLO.String() != "5ms" || len(tp.Publishers) != 10 {
		t.Errorf("topic %+v", tp)
	}
	if p := tp.Publishers[8]; p.Batch != 1 || p.Group != "" || p.Rate != 2000 {
		t.Errorf("gate-a: %+v (batch defaults to 1)", p)
	}
	if _, err := LoadBrokers("testdata/missing.yaml"); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		topic bool
		data  string
		want  string
	}{
		{false, "", "f.yaml: empty file"},
		{false, "brokers: []\n", "f.yaml:1: brokers: no brokers"},
		{false, "brokers:\n  - name: a\n    mcap: 10\n    lod: 3\n", "f.yaml:4: field lod not found"},
		{false, "brokers:\n  - name: a\n    mcap: ten\n", "f.yaml:3: cannot unmarshal"},
		{false, "brokers:\n  - name: a\n    mcap: 10\n  - name: b\n    mcap: -1\n", "f.yaml:5: brokers[1].mcap: -1"},
		{false, "brokers:\n  - name: a\n    mcap: 10\n  - name: a\n    mcap: 1\n", "f.yaml:4: brokers[1].name: \"a\" is a duplicate"},
		{false, "brokers:\n  - mcap: 10\n", "f.yaml:2: brokers[0].name: missing"},
		{false, "brokers:\n  - name: a\n    mcap: 10\n    load: .nan\n", "f.yaml:4: brokers[0].load"},
		{true, "name: t\nrate: 10\nburst: 0\npublishers: [{name: p, rate: 1}]\n", "f.yaml:3: burst: 0"},
		{true, "name: t\nrate: 10\nburst: 5\nslo: fast\npublishers: [{name: p, rate: 1}]\n", "f.yaml:4: slo: \"fast\""},
		{true, "name: t\nrate: 10\nburst: 5\npublishers:\n  - {name: p, rate: 1}\n  - {name: q, rate: 0}\n", "f.yaml:6: publishers[1].rate: 0"},
		{true, "name: t\nrate: 10\nburst: 5\n", "publishers: none"},
		{true, "name: t\nrate: 10\nburst: 5\ncolour: red\n", "field colour not found"},
		{true, "name: t\nrate: -3\nburst: 5\npublishers: [{name: p, rate: 1}]\n", "f.yaml:2: rate: -3"},
	} {
		var err error
		if tc.topic {
			_, err = ParseTopic([]byte(tc.data), "f.yaml")
		} else {
			_, err = ParseBrokers([]byte(tc.data), "f.yaml")
		}
		t.Logf("%v", err)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want it to contain %q", tc.data, err, tc.want)
		}
	}
}

func seeds(f *testing.F, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte(""))
	f.Add([]byte("brokers: [{name: a, mcap: 1e308, load: 1e308}]"))
	f.Add([]byte("name: t\nrate: 1e-9\nburst: 9223372036854775807\nslo: -1s\npublishers: [{name: p, rate: 1, batch: -1}]"))
	f.Add([]byte("[1, 2"))
	f.Add([]byte("brokers: &a [*a]"))
}

// FuzzParseBrokers: ParseBrokers never panics, and what it accepts plans
// without panicking.
func FuzzParseBrokers(f *testing.F) {
	seeds(f, "testdata/brokers.yaml")
	topic, err := LoadTopic("testdata/topic.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := ParseBrokers(data, "fuzz.yaml")
		if err != nil {
			return
		}
		for _, p := range []Policy{Concentration, MaxMin, LoadBalance} {
			if res, err := Plan(b, topic, p); err == nil {
				checkPlan(t, b, topic, res)
			}
		}
	})
}

// FuzzParseTopic: ParseTopic never panics, and what it accepts plans
// without panicking.
func FuzzParseTopic(f *testing.F) {
	seeds(f, "testdata/topic.yaml")
	brokers, err := LoadBrokers("testdata/brokers.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tp, err := ParseTopic(data, "fuzz.yaml")
		if err != nil {
			return
		}
		if len(tp.Publishers) > 1000 {
			return
		}
		for _, p := range []Policy{Concentration, MaxMin, LoadBalance} {
			if res, err := Plan(brokers, tp, p); err == nil {
				checkPlan(t, brokers, tp, res)
			}
		}
	})
}
