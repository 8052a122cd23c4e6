package redisproc

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// helperEnv makes the test binary a helper that starts a server on the
// port and in the directory it names ("port dir"), says "ready", and
// waits to be killed.
const helperEnv = "LEASEHOLD_REDISPROC_HELPER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(helperEnv); spec != "" {
		var port int
		var dir string
		if _, err := fmt.Sscan(spec, &port, &dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if _, err := Start(dir, port); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("ready")
		select {}
	}
	os.Exit(m.Run())
}

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

// TestServerDiesWithItsProcess kills, with SIGKILL, a process that started
// a server and never stopped it (as a test binary that times out or is
// killed does): the server must not live on, holding its port and data.
func TestServerDiesWithItsProcess(t *testing.T) {
	if !Installed() {
		t.Fatal(InstallHint)
	}
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	helper := exec.Command(os.Args[0])
	helper.Env = append(os.Environ(), helperEnv+"="+strconv.Itoa(port)+" "+t.TempDir())
	helper.Stderr = os.Stderr
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		_ = helper.Process.Kill()
		t.Fatalf("helper said %q (%v), not ready", line, err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), MaxRetries: -1})
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("the helper's server does not answer: %v", err)
	}

	_ = helper.Process.Kill()
	_ = helper.Wait()
	// A loop of its own, not testenv.Eventually: testenv starts its
	// servers with this package. A server left behind is shut down.
	for deadline := time.Now().Add(10 * time.Second); rdb.Ping(context.Background()).Err() == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			_ = rdb.ShutdownNoSave(context.Background()).Err() // do not leave it behind
			t.Fatal("the server outlived the process that started it by 10s")
		}
	}
}
