package console_test

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/console"
)

// No console file parses text as markup or code, or carries inline script
// or style: tenant data stays text even where the policy would not catch
// it. (The browser tests check the same from the outside.)
func TestFilesBuildTheDOMOnly(t *testing.T) {
	t.Parallel()
	forbidden := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|setAttribute\(\s*'on|\.on[a-z]+\s*=|style\s*=|<style|<script>|javascript:`)
	files := 0
	err := fs.WalkDir(console.Files(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files++
		b, err := fs.ReadFile(console.Files(), path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := forbidden.FindString(line); m != "" {
				t.Errorf("%s:%d uses %q: %s", path, i+1, m, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 5 {
		t.Fatalf("only %d files embedded", files)
	}
}
