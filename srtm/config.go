package srtm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// The YAML files of `tokenmesh plan` (ours; the paper has no file format).
// See testdata/brokers.yaml and testdata/topic.yaml.
//
//	brokers:
//	  - {name: b1, mcap: 10000, load: 2500}   # msg/s
//
//	name: sensors
//	rate: 4000        # r, msg/s
//	burst: 200        # b, tokens
//	slo: 5ms          # p99 latency bound (Go duration)
//	publishers:
//	  - {name: p1, rate: 100, batch: 1, group: floor1}

type brokersFile struct {
	Brokers []brokerYAML `yaml:"brokers"`
}

type brokerYAML struct {
	Name string  `yaml:"name"`
	MCap float64 `yaml:"mcap"`
	Load float64 `yaml:"load"`
}

type topicFile struct {
	Name       string          `yaml:"name"`
	Rate       float64         `yaml:"rate"`
	Burst      int64           `yaml:"burst"`
	SLO        string          `yaml:"slo"`
	Publishers []publisherYAML `yaml:"publishers"`
}

type publisherYAML struct {
	Name  string  `yaml:"name"`
	Rate  float64 `yaml:"rate"`
	Batch int     `yaml:"batch"`
	Group string  `yaml:"group"`
}

// LoadBrokers reads a brokers file (see ParseBrokers; ours, the paper has
// no file format). Errors: os.ReadFile's (naming path) or ParseBrokers'.
func LoadBrokers(path string) ([]Broker, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseBrokers(data, path)
}

// LoadTopic reads a topic file (see ParseTopic; ours, the paper has no file
// format). Errors: os.ReadFile's (naming path) or ParseTopic's.
func LoadTopic(path string) (Topic, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Topic{}, err
	}
	return ParseTopic(data, path)
}

// decodeStrict decodes one YAML document into v with unknown fields
// rejected, and also returns its node tree for locating fields.
func decodeStrict(data []byte, name string, v any) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: empty file", name)
		}
		var te *yaml.TypeError
		if errors.As(err, &te) {
			msgs := make([]string, len(te.Errors))
			for i, m := range te.Errors {
				msgs[i] = fileLine(name, m)
			}
			return nil, errors.New(strings.Join(msgs, "; "))
		}
		return nil, errors.New(fileLine(name, strings.TrimPrefix(err.Error(), "yaml: ")))
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	return &root, nil
}

var lineRE = regexp.MustCompile(`^line (\d+): `)

// fileLine turns yaml.v3's "line N: msg" into "file:N: msg" and drops its
// Go type names.
func fileLine(name, msg string) string {
	if i := strings.Index(msg, " in type srtm."); i >= 0 {
		msg = msg[:i]
	}
	msg = strings.ReplaceAll(msg, "srtm.", "")
	if m := lineRE.FindStringSubmatch(msg); m != nil {
		return name + ":" + m[1] + ": " + msg[len(m[0]):]
	}
	return name + ": " + msg
}

// lineOf returns the line of the node at path (map keys as strings, sequence
// indices as ints) below root, or of the deepest node found on the way.
func lineOf(root *yaml.Node, path ...any) int {
	n := root
	if n == nil {
		return 0
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := n.Line
	for _, p := range path {
		var next *yaml.Node
		switch k := p.(type) {
		case string:
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if n.Content[i].Value == k {
						next = n.Content[i+1]
						line = n.Content[i].Line
						break
					}
				}
			}
		case int:
			if n.Kind == yaml.SequenceNode && k >= 0 && k < len(n.Content) {
				next = n.Content[k]
				line = next.Line
			}
		}
		if next == nil {
			return line
		}
		n = next
	}
	return line
}

// ParseBrokers parses a brokers file: a top-level `brokers:` list of
// {name, mcap, load} (msg/s). name is the file name used in errors.
//
// Errors name the file, the line and the field: YAML syntax and type
// errors, unknown fields, no brokers, an empty or duplicate name, an mcap
// that is not a finite number > 0, a load that is not a finite number >= 0.
func ParseBrokers(data []byte, name string) ([]Broker, error) {
	var f brokersFile
	root, err := decodeStrict(data, name, &f)
	if err != nil {
		return nil, err
	}
	if len(f.Brokers) == 0 {
		return nil, fmt.Errorf("%s:%d: brokers: no brokers listed", name, lineOf(root, "brokers"))
	}
	out := make([]Broker, len(f.Brokers))
	seen := map[string]bool{}
	for i, b := range f.Brokers {
		at := func(field string) int { return lineOf(root, "brokers", i, field) }
		switch {
		case strings.TrimSpace(b.Name) == "":
			return nil, fmt.Errorf("%s:%d: brokers[%d].name: missing or empty", name, at("name"), i)
		case seen[b.Name]:
			return nil, fmt.Errorf("%s:%d: brokers[%d].name: %q is a duplicate", name, at("name"), i, b.Name)
		case !finite(b.MCap) || b.MCap <= 0:
			return nil, fmt.Errorf("%s:%d: brokers[%d].mcap: %v must be a finite number > 0 (msg/s)", name, at("mcap"), i, b.MCap)
		case !finite(b.Load) || b.Load < 0:
			return nil, fmt.Errorf("%s:%d: brokers[%d].load: %v must be a finite number >= 0 (msg/s)", name, at("load"), i, b.Load)
		}
		seen[b.Name] = true
		out[i] = Broker{Name: b.Name, MCap: b.MCap, Load: b.Load}
	}
	return out, nil
}

// ParseTopic parses a topic file: name, rate (msg/s), burst (tokens), slo (a
// Go duration such as "5ms"; optional) and a list of publishers {name, rate,
// batch (default 1), group}. name is the file name used in errors.
//
// Errors name the file, the line and the field, as ParseBrokers, plus
// everything Plan rejects in a topic (see Plan).
func ParseTopic(data []byte, name string) (Topic, error) {
	var f topicFile
	root, err := decodeStrict(data, name, &f)
	if err != nil {
		return Topic{}, err
	}
	t := Topic{Name: f.Name, Rate: f.Rate, Burst: f.Burst}
	if f.SLO != "" {
		d, err := time.ParseDuration(f.SLO)
		if err != nil || d < 0 {
			return Topic{}, fmt.Errorf("%s:%d: slo: %q is not a non-negative duration such as 5ms", name, lineOf(root, "slo"), f.SLO)
		}
		t.SLO = d
	}
	for _, p := range f.Publishers {
		if p.Batch == 0 {
			p.Batch = 1
		}
		t.Publishers = append(t.Publishers, Publisher{Name: p.Name, Rate: p.Rate, Batch: p.Batch, Group: p.Group})
	}
	if err := validateTopic(t); err != nil {
		// validateTopic names the field as topic.x or topic.publishers[j].x;
		// find its line.
		msg := err.Error()
		field := strings.TrimPrefix(msg[:strings.Index(msg+":", ":")], "topic.")
		path := []any{}
		for _, part := range strings.Split(field, ".") {
			if i := strings.Index(part, "["); i >= 0 {
				var j int
				fmt.Sscanf(part[i:], "[%d]", &j)
				path = append(path, part[:i], j)
			} else {
				path = append(path, part)
			}
		}
		return Topic{}, fmt.Errorf("%s:%d: %s", name, lineOf(root, path...), strings.TrimPrefix(msg, "topic."))
	}
	return t, nil
}
