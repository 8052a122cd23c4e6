package redisproc

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestStartInARelativeDir starts redis-server with its data in a relative
// directory, as the dev mode does with .dev: it must answer, and its log
// and AOF must be in that directory.
func TestStartInARelativeDir(t *testing.T) {
	if !Installed() {
		t.Fatal(InstallHint)
	}
	t.Chdir(t.TempDir())
	if err := os.MkdirAll("data/redis", 0o755); err != nil {
		t.Fatal(err)
	}
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s, err := Start("data/redis", port)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Kill()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("data/redis/redis.log"); err != nil {
		t.Errorf("no log in the data directory: %v", err)
	}
}
