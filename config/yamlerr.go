package config

import (
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// YAMLError is yaml.v3's error message msg ("yaml: line 3: did not find
// expected key") as an *Error of file: the line when msg gives one (else
// 0), the message without its "yaml: " and "line N: " prefixes (ours;
// envoyrls reads its files' syntax errors with it too).
func YAMLError(file, msg string) *Error {
	m := strings.TrimPrefix(msg, "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(m, "line "); ok {
		if n, after, ok := strings.Cut(rest, ":"); ok {
			if l, err := strconv.Atoi(n); err == nil {
				line, m = l, strings.TrimSpace(after)
			}
		}
	}
	return &Error{File: file, Line: line, Msg: m}
}

// yamlError turns a yaml.v3 error ("yaml: line 3: ...", or a TypeError with
// "line 3: field brust not found in type config.rawRule") into an *Error.
func yamlError(file string, data []byte, err error) error {
	var te *yaml.TypeError
	msgs := []string{err.Error()}
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	ye := YAMLError(file, msgs[0])
	// Go type names mean nothing to a user: say what the YAML should be.
	m, line := yamlTypeNames.Replace(ye.Msg), ye.Line
	if len(msgs) > 1 {
		m += fmt.Sprintf(" (and %d more)", len(msgs)-1)
	}
	e := &Error{File: file, Line: line, Msg: m}
	if line > 0 {
		root := parseNode(data)
		if name, ok := strings.CutPrefix(m, "field "); ok {
			name, _, _ = strings.Cut(name, " not found")
			if path, parent := pathAt(root, "", line, name, true); path != "" {
				e.Field, e.Msg = path, "unknown field"+knownFields(parent)
			}
		} else if path, _ := pathAt(root, "", line, "", false); path != "" && !strings.HasPrefix(path, "[") {
			e.Field = path
		}
	}
	return e
}

// knownFields lists the fields of the mapping at parent (a field path:
// "", "node", "node.tls", "rules[2]"), read from the yaml tags of the
// struct it decodes into; "" when parent is not a mapping of the file.
func knownFields(parent string) string {
	t := reflect.TypeOf(rawFile{})
	if parent != "" {
		for _, step := range strings.Split(parent, ".") {
			name, _, indexed := strings.Cut(step, "[")
			f, ok := yamlField(t, name)
			if !ok {
				return ""
			}
			t = f.Type
			if t.Kind() == reflect.Pointer {
				t = t.Elem()
			}
			if indexed {
				if t.Kind() != reflect.Slice {
					return ""
				}
				t = t.Elem()
			}
		}
	}
	if t.Kind() != reflect.Struct {
		return ""
	}
	return " (known: " + strings.Join(yamlFieldNames(t), ", ") + ")"
}

// yamlField is the field of struct t whose yaml tag is name.
func yamlField(t reflect.Type, name string) (reflect.StructField, bool) {
	if t.Kind() != reflect.Struct {
		return reflect.StructField{}, false
	}
	for i := range t.NumField() {
		if f := t.Field(i); yamlName(f) == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// yamlName is f's key in YAML (its yaml tag; "" for an untagged field).
func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return name
}

// yamlFieldNames lists the YAML keys of struct t in declaration order.
func yamlFieldNames(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		if n := yamlName(t.Field(i)); n != "" && n != "-" {
			out = append(out, n)
		}
	}
	return out
}

// yamlTypeNames rewrites the Go type names yaml.v3 puts in its errors
// ("cannot unmarshal !!str `x` into config.rawAPITLS", "field brust not
// found in type config.rawRule") into what the YAML should be ("a
// mapping with cert_file, key_file, client_ca_file"), for every type the
// file decodes into: it is built from rawFile's fields by reflection, so
// a struct or field added later is covered without a hand-kept list.
var yamlTypeNames = newYAMLTypeNames()

func newYAMLTypeNames() *strings.Replacer {
	descs := map[string]string{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		name := t.String()
		if _, done := descs[name]; done {
			return
		}
		descs[name] = describeYAML(t)
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map:
			walk(t.Elem())
		case reflect.Struct:
			for i := range t.NumField() {
				walk(t.Field(i).Type)
			}
		}
	}
	walk(reflect.TypeOf(rawFile{}))
	names := make([]string, 0, len(descs))
	for n := range descs {
		names = append(names, n)
	}
	// Longest first, so that "[]config.rawRule" is rewritten as a whole,
	// and " in type T" (the tail of an unknown field's message) goes. The
	// replacer tries pairs in argument order at each position.
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(len(b), len(a)), cmp.Compare(a, b)) })
	var pairs []string
	for _, n := range names {
		if strings.Contains(n, ".") {
			pairs = append(pairs, " in type "+n, "")
		}
	}
	for _, n := range names {
		switch {
		case n == descs[n]:
		case strings.ContainsAny(n, ".[*"):
			pairs = append(pairs, n, descs[n])
		default: // "string", "bool": only where a type is named
			pairs = append(pairs, "into "+n, "into "+descs[n])
		}
	}
	return strings.NewReplacer(pairs...)
}

// describeYAML says in words what YAML decodes into t.
func describeYAML(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return describeYAML(t.Elem())
	case reflect.Struct:
		return "a mapping with " + strings.Join(yamlFieldNames(t), ", ")
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Struct {
			return "a list of mappings"
		}
		return "a list of " + strings.TrimPrefix(describeYAML(t.Elem()), "a ") + "s"
	case reflect.Map:
		return "a mapping of name: value"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	}
	return t.String()
}

// pathAt finds, under n (whose path is at), the first node on line: a
// mapping key equal to key when isKey, else any value node. It returns the
// node's field path and its parent's path ("" if not found).
func pathAt(n *yaml.Node, at string, line int, key string, isKey bool) (path, parent string) {
	if n == nil {
		return "", ""
	}
	switch n.Kind {
	case yaml.MappingNode:
		return pathInMapping(n, at, line, key, isKey)
	case yaml.SequenceNode:
		return pathInSequence(n, at, line, key, isKey)
	}
	return "", ""
}

// joinPath appends field b to the path a.
func joinPath(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

// pathInMapping is pathAt for a mapping node: its entries in order, each
// matched itself (pairAt) before what is under its value.
func pathInMapping(n *yaml.Node, at string, line int, key string, isKey bool) (path, parent string) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p := joinPath(at, k.Value)
		if pairAt(k, v, line, key, isKey) {
			return p, at
		}
		if path, parent := pathAt(v, p, line, key, isKey); path != "" {
			return path, parent
		}
	}
	return "", ""
}

// pairAt reports whether the mapping entry k: v is what pathAt looks for:
// the key k on line equal to key when isKey, else a value on line that is
// a scalar or starts on its key's line.
func pairAt(k, v *yaml.Node, line int, key string, isKey bool) bool {
	if isKey {
		return k.Line == line && k.Value == key
	}
	if v.Line != line {
		return false
	}
	return (v.Kind != yaml.MappingNode && v.Kind != yaml.SequenceNode) || k.Line == line
}

// pathInSequence is pathAt for a sequence node: a scalar item on line (not
// isKey), else the first match under an item.
func pathInSequence(n *yaml.Node, at string, line int, key string, isKey bool) (path, parent string) {
	for i, c := range n.Content {
		p := fmt.Sprintf("%s[%d]", at, i)
		if !isKey && c.Line == line && c.Kind == yaml.ScalarNode {
			return p, at
		}
		if path, parent := pathAt(c, p, line, key, isKey); path != "" {
			return path, parent
		}
	}
	return "", ""
}

func parseNode(data []byte) *yaml.Node {
	var n yaml.Node
	if err := yaml.Unmarshal(data, &n); err != nil {
		return nil
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		return n.Content[0]
	}
	return nil
}

// lineOf finds the line of the value at path (map keys as strings, sequence
// indexes as ints) in root; 0 when not found. For a map key whose value is
// missing, the line of the nearest ancestor found is returned.
func lineOf(root *yaml.Node, path ...any) int {
	n, line := root, 0
	if n != nil {
		line = n.Line
	}
	for _, step := range path {
		if n == nil {
			return line
		}
		var next *yaml.Node
		switch s := step.(type) {
		case string:
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if n.Content[i].Value == s {
						next = n.Content[i+1]
						break
					}
				}
			}
		case int:
			if n.Kind == yaml.SequenceNode && s >= 0 && s < len(n.Content) {
				next = n.Content[s]
			}
		}
		if next == nil {
			return line
		}
		n, line = next, next.Line
	}
	return line
}
