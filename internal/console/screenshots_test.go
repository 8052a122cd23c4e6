package console_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/console"
)

// manifest lists, beside the console's screenshots in docs/, what each
// was made from: "<assets digest> <image digest> <file>" a line. The
// screenshot run writes it; TestScreenshotsShowTheAssets reads it.
var manifest = filepath.Join("..", "..", "docs", "console-screenshots.sha256")

// assetsDigest is one digest of every console file, path and content,
// so any change to what the console looks like changes it.
func assetsDigest(t *testing.T) string {
	t.Helper()
	sum := sha256.New()
	err := fs.WalkDir(console.Files(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(console.Files(), path)
		if err != nil {
			return err
		}
		fmt.Fprintf(sum, "%s %s\n", path, digest(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(sum.Sum(nil))
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// writeManifest records that the files named (in docs/) were made from
// the console's assets as they are now.
func writeManifest(t *testing.T, files []string) {
	t.Helper()
	assets := assetsDigest(t)
	var b strings.Builder
	b.WriteString("# The console's screenshots and the digest of internal/console/assets they show.\n")
	b.WriteString("# Written by: LEASEHOLD_SCREENSHOTS=1 go test -run TestConsole ./internal/console/\n")
	for _, f := range files {
		png, err := os.ReadFile(filepath.Join("..", "..", "docs", f))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %s %s\n", assets, digest(png), f)
	}
	if err := os.WriteFile(manifest, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Every console screenshot that the README shows was made from the
// console's assets as they are now: a change to the console that is not
// followed by new screenshots fails here. Contents are compared, not file
// times, which a clone resets.
func TestScreenshotsShowTheAssets(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	shown := regexp.MustCompile(`\]\(docs/(console-[a-z0-9-]+\.png)\)`).FindAllStringSubmatch(string(readme), -1)
	if len(shown) == 0 {
		t.Fatal("the README shows no console screenshot")
	}
	list, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	made := map[string][2]string{} // file: assets digest, image digest
	for _, line := range strings.Split(string(list), "\n") {
		if f := strings.Fields(line); len(f) == 3 && !strings.HasPrefix(line, "#") {
			made[f[2]] = [2]string{f[0], f[1]}
		}
	}
	assets := assetsDigest(t)
	const again = "; make them again: LEASEHOLD_SCREENSHOTS=1 go test -run TestConsole ./internal/console/"
	for _, m := range shown {
		file := m[1]
		png, err := os.ReadFile(filepath.Join("..", "..", "docs", file))
		if err != nil {
			t.Errorf("the README shows docs/%s: %v", file, err)
			continue
		}
		switch from, ok := made[file]; {
		case !ok:
			t.Errorf("docs/%s is not in %s%s", file, filepath.Base(manifest), again)
		case from[1] != digest(png):
			t.Errorf("docs/%s is not the image the screenshot run made%s", file, again)
		case from[0] != assets:
			t.Errorf("docs/%s shows older console assets than internal/console/assets%s", file, again)
		}
	}
}
