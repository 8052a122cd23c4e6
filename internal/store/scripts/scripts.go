// Package scripts holds Leasehold's Lua scripts, one per .lua file. Each file
// starts with its contract: the KEYS and ARGV it takes and what it returns.
// Every key a script touches comes in through KEYS and shares one hash tag,
// so each script is atomic on a Redis Cluster too; time comes from Redis TIME.
package scripts

import (
	"bytes"
	"embed"

	"github.com/redis/go-redis/v9"
)

//go:embed *.lua
var files embed.FS

// Load returns the script in file name, after the library files libs (Lua
// has no include: a library's local functions are in scope of the script
// that follows it). A missing file is a programming error, so Load
// panics.
//
// Each comment line is sent as an empty one (uncommented): the comments
// are more than half of the text, which Redis hashes at every EVAL (a
// batch submit sends one per chunk) and which every EVAL sends, and the
// lines keep their numbers for Redis's error messages.
func Load(name string, libs ...string) *Script {
	var src []byte
	for _, f := range append(libs, name) {
		b, err := files.ReadFile(f)
		if err != nil {
			panic("scripts: " + err.Error())
		}
		src = append(uncommented(src, b), '\n')
	}
	return &Script{redis.NewScript(string(src))}
}

// uncommented appends Lua source b to dst with every line whose first
// characters but blanks are "--" left empty. (No script has a long string
// or a block comment, whose lines such a rule would misread:
// TestScriptsHaveNoLongBrackets.)
func uncommented(dst, b []byte) []byte {
	for line := range bytes.Lines(b) {
		if bytes.HasPrefix(bytes.TrimLeft(line, " \t"), []byte("--")) {
			if bytes.HasSuffix(line, []byte("\n")) {
				dst = append(dst, '\n')
			}
			continue
		}
		dst = append(dst, line...)
	}
	return dst
}
