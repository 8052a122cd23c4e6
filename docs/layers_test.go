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
	imports := map[string][]string{}
	for pkg, deps := range packageImports(t) {
		pkg = strings.TrimPrefix(pkg, module)
		imports[pkg] = nil
		for _, d := range deps {
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

// Only the store talks to Redis: outside tests, go-redis and the store's
// keys and scripts are imported by the store itself and by what stands
// beside it by role: the entry point (leasehold.New takes the embedder's
// client), the connection set-up in cmd/, an embedding example, and the
// test and dev tools that start Redis.
func TestOnlyTheStoreTalksToRedis(t *testing.T) {
	t.Parallel()
	const goRedis = "github.com/redis/go-redis/v9"
	owners := map[string]bool{
		"internal/store": true, "internal/store/keys": true, "internal/store/scripts": true,
	}
	beside := map[string]bool{
		"": true, "cmd/api": true, "cmd/worker": true, "cmd/leasehold": true,
		"examples/go-handler": true, "internal/testenv": true, "internal/redisproc": true,
	}
	// Packages whose Redis code has not moved into the store yet. The list
	// only shrinks: a package that no longer needs its place fails the test
	// until it is taken off.
	notYet := map[string]bool{
		"execution": true, "internal/cli": true,
		"internal/httpapi": true, "internal/replicas": true,
	}
	talks := map[string]bool{}
	for path, deps := range packageImports(t) {
		pkg := strings.TrimPrefix(strings.TrimPrefix(path, "github.com/leasehold/leasehold"), "/")
		for _, d := range deps {
			storage := d == goRedis || d == module+"internal/store/keys" || d == module+"internal/store/scripts"
			if !storage || owners[pkg] {
				continue
			}
			talks[pkg] = true
			if d != goRedis || !beside[pkg] {
				if !notYet[pkg] {
					t.Errorf("%s imports %s: only internal/store talks to Redis", pkg, d)
				}
			}
		}
	}
	for pkg := range notYet {
		if !talks[pkg] {
			t.Errorf("%s no longer talks to Redis: take it off notYet", pkg)
		}
	}
}

// packageImports maps each package of the module (its import path) to the
// packages it imports, tests left out.
func packageImports(t *testing.T) map[string][]string {
	t.Helper()
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
			return imports
		} else if err != nil {
			t.Fatal(err)
		}
		imports[p.ImportPath] = p.Imports
	}
}
