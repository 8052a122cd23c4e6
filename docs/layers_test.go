package docs_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/leasehold/leasehold/"

// layers reads the table of architecture.md's "Layers" section: package
// (relative to the module) → layer.
func layers(t *testing.T) map[string]int {
	t.Helper()
	doc, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "\n## Layers\n")
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile(`^\| ([0-9]+) \| (.*) \|$`)
	out := map[string]int{}
	for line := range strings.Lines(section) {
		m := row.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		for _, p := range strings.Split(m[2], ",") {
			out[strings.Trim(strings.TrimSpace(p), "`")] = n
		}
	}
	if len(out) == 0 {
		t.Fatal("architecture.md has no table of layers")
	}
	return out
}

// violations lists each import of a package from a higher layer, and each
// package the table lacks. imports maps a package to what it imports, all
// relative to the module.
func violations(layer map[string]int, imports map[string][]string) []string {
	var out []string
	for pkg, deps := range imports {
		l, ok := layer[pkg]
		if !ok {
			out = append(out, pkg+" is in no layer: add it to the table in docs/architecture.md")
			continue
		}
		for _, d := range deps {
			if dl, ok := layer[d]; ok && dl > l {
				out = append(out, fmt.Sprintf("%s (layer %d) imports %s (layer %d), a layer above it", pkg, l, d, dl))
			}
		}
	}
	return out
}

// No package imports one of a higher layer (tests aside: they may drive
// the layers above them).
func TestNoPackageImportsALayerAboveIt(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports", "../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkg := strings.TrimPrefix(p.ImportPath, module)
		imports[pkg] = nil
		for _, d := range p.Imports {
			if rel, ok := strings.CutPrefix(d, module); ok {
				imports[pkg] = append(imports[pkg], rel)
			}
		}
	}
	layer := layers(t)
	for _, v := range violations(layer, imports) {
		t.Error(v)
	}
	// The check itself catches a breach: job importing execution.
	if v := violations(layer, map[string][]string{"job": {"execution"}}); len(v) != 1 {
		t.Errorf("job importing execution is not caught: %v", v)
	}
}
