package localcluster

import (
	"reflect"
	"testing"

	"github.com/tokenmesh/tokenmesh/config"
	"github.com/tokenmesh/tokenmesh/rule"
	"github.com/tokenmesh/tokenmesh/strategy"
)

// TestNodeConfigYAMLParses: what Start writes for a node is a config file
// config.Parse accepts, with the rules given (a zero burst and an empty
// strategy take config's defaults), the join list, and the secret key or
// insecure without one.
func TestNodeConfigYAMLParses(t *testing.T) {
	rules := []rule.Rule{
		{Name: "api", Rate: rule.MustRate("1/3s"), Burst: 5, Strategy: "gcounter", Params: []string{"gossip=20ms"}, Partition: strategy.PartitionConserve},
		{Name: "b", Rate: rule.MustRate("2.5")},
	}
	key := []byte("0123456789abcdef")
	b, err := NodeConfigYAML("n3", []string{"127.0.0.1:7946"}, rules, key)
	if err != nil {
		t.Fatal(err)
	}
	f, err := config.Parse(b, "n3.yaml")
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if f.Node.Name != "n3" || !reflect.DeepEqual(f.Node.Join, []string{"127.0.0.1:7946"}) || string(f.Node.SecretKey) != string(key) || f.Node.Insecure {
		t.Errorf("node: %+v", f.Node)
	}
	want := []rule.Rule{
		{Name: "api", Key: config.DefaultKey, Rate: rules[0].Rate, Burst: 5, Strategy: "gcounter", Params: []string{"gossip=20ms"}, Partition: strategy.PartitionConserve},
		{Name: "b", Key: config.DefaultKey, Rate: rules[1].Rate, Burst: 3, Strategy: config.DefaultStrategy},
	}
	if !reflect.DeepEqual(f.Rules, want) {
		t.Errorf("rules:\n got %+v\nwant %+v", f.Rules, want)
	}
	b, err = NodeConfigYAML("n4", nil, rules, nil)
	if err != nil {
		t.Fatal(err)
	}
	if f, err = config.Parse(b, "n4.yaml"); err != nil || !f.Node.Insecure || f.Node.SecretKey != nil {
		t.Fatalf("without a key: %v, %+v", err, f)
	}
}
