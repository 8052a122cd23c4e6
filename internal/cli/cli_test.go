package cli_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/redisproc"
	"github.com/leasehold/leasehold/internal/testenv"
)

func TestMain(m *testing.M) {
	code := testenv.Run(m, nil)
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

var built struct {
	once sync.Once
	dir  string
	err  error
}

// binaries builds cmd/api, cmd/worker and cmd/leasehold once per test
// binary and returns the directory that holds them.
func binaries(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "leasehold-bin-")
		if built.err == nil {
			out, err := exec.Command("go", "build", "-o", built.dir,
				"github.com/leasehold/leasehold/cmd/api", "github.com/leasehold/leasehold/cmd/worker",
				"github.com/leasehold/leasehold/cmd/leasehold").CombinedOutput()
			if err != nil {
				built.err = fmt.Errorf("go build: %v\n%s", err, out)
			}
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.dir
}

const secret = "hunter2-s3cr3t-0123456789"

// testKey is the acme tenant's API key where the tests start an api.
const testKey = "k-0123456789abcdef"

// TestNoSecretInUsageOrErrors runs the real binaries with secrets in their
// environment: neither -h, a mistyped flag, nor a Redis or NATS URL that
// does not work prints one.
func TestNoSecretInUsageOrErrors(t *testing.T) {
	t.Parallel()
	dir := binaries(t)
	closed, err := redisproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	env := []string{
		"LEASEHOLD_API_KEYS=acme:" + secret,
		"LEASEHOLD_LLM_API_KEY=" + secret,
		"LEASEHOLD_REDIS_URL=redis://user:" + secret + "@127.0.0.1:" + strconv.Itoa(closed) + "/0",
		"LEASEHOLD_NATS_URL=nats://user:" + secret + "@127.0.0.1:" + strconv.Itoa(closed),
		"LEASEHOLD_LLM_BASE_URL=https://user:" + secret + "@llm.example/v1",
		"LEASEHOLD_HANDLERS=summarize=https://user:" + secret + "@handlers.example/summarize",
		"LEASEHOLD_KEY=" + secret,
		"LEASEHOLD_ADDR=127.0.0.1:0",
		"LEASEHOLD_METRICS_ADDR=127.0.0.1:0",
	}
	for _, tc := range []struct {
		name    string
		args    []string
		env     []string
		failing bool // exits non-zero
	}{
		{"api -h", []string{"api", "-h"}, nil, false},
		{"api mistyped flag", []string{"api", "--adr", "x"}, nil, true},
		{"worker -h", []string{"worker", "-h"}, nil, false},
		{"worker mistyped flag", []string{"worker", "--concurency", "1"}, nil, true},
		{"leasehold dev -h", []string{"leasehold", "dev", "-h"}, nil, false},
		{"api, redis refuses connections", []string{"api"}, nil, true},
		{"worker, redis refuses connections", []string{"worker"}, nil, true},
		{"api, malformed redis url", []string{"api"}, []string{"LEASEHOLD_REDIS_URL=redis://user:" + secret + "@127.0.0.1:port/0"}, true},
		{"api, malformed cluster url", []string{"api"}, []string{"LEASEHOLD_REDIS_URL=redis+cluster://user:" + secret + "@h1:1,h2:x/?pool_size=z"}, true},
		{"api, redis password in a parameter", []string{"api"}, []string{"LEASEHOLD_REDIS_URL=redis+sentinel://127.0.0.1:" + strconv.Itoa(closed) + "/m?password=" + secret + "&bogus=1"}, true},
		{"api, malformed nats url", []string{"api"}, []string{
			"LEASEHOLD_REDIS_URL=redis://" + testenv.Redis(t).Addr() + "/0",
			"LEASEHOLD_NATS_URL=nats://user:" + secret + "@127.0.0.1:port",
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(dir, tc.args[0]), tc.args[1:]...)
			cmd.Env = append(append(os.Environ(), env...), tc.env...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			done := make(chan error, 1)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if (err != nil) != tc.failing {
					t.Errorf("exit: %v, want failing=%v\n%s", err, tc.failing, out.String())
				}
			case <-time.After(60 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("did not exit\n%s", out.String())
			}
			if strings.Contains(out.String(), secret) {
				t.Errorf("the output shows the secret:\n%s", out.String())
			}
			if out.Len() == 0 {
				t.Error("no output at all")
			}
		})
	}
}

// TestAPIRefusesWeakKeys: the api binary does not start on the keys a
// deployment file ships as examples, or on short ones: it exits at once,
// before it reaches Redis, with an error that names the pair and not the key.
func TestAPIRefusesWeakKeys(t *testing.T) {
	t.Parallel()
	dir := binaries(t)
	for keys, want := range map[string]string{
		"acme:0123456789abcdef,admin:REPLACE-ME":          "api keys: pair 2 (tenant admin): a key must have at least 16 characters",
		"admin:example-admin-key-change-me":               "api keys: pair 1 (tenant admin): the key is a placeholder",
		"acme:" + secret + ",admin:REPLACE-ME-0123456789": "api keys: pair 2 (tenant admin): the key is a placeholder",
		"": "api keys: none given",
	} {
		cmd := exec.Command(filepath.Join(dir, "api"))
		// Redis is never reached: its URL points at nothing.
		cmd.Env = append(os.Environ(), "LEASEHOLD_API_KEYS="+keys, "LEASEHOLD_REDIS_URL=redis://127.0.0.1:1/0",
			"LEASEHOLD_ADDR=127.0.0.1:0", "LEASEHOLD_METRICS_ADDR=127.0.0.1:0")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), want) {
			t.Errorf("api with LEASEHOLD_API_KEYS=%q: %v\n%s\nwant exit 1 with %q", keys, err, out, want)
		}
		if strings.Contains(string(out), "REPLACE-ME") || strings.Contains(string(out), secret) || strings.Contains(string(out), "redis") {
			t.Errorf("api with LEASEHOLD_API_KEYS=%q shows a key, or went on to Redis:\n%s", keys, out)
		}
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"redis://127.0.0.1:6379/0":                         "redis://127.0.0.1:6379/0",
		"redis://user@h:1/0":                               "redis://user@h:1/0",
		"redis://:pw@h:1/0":                                "redis://:xxxxx@h:1/0",
		"rediss://u:p%40w@h:1/0?pool_size=3":               "rediss://u:xxxxx@h:1/0?pool_size=3",
		"redis+sentinel://s:1,s:2/m?password=pw&db=1":      "redis+sentinel://s:1,s:2/m?password=xxxxx&db=1",
		"redis+cluster://u:a:b@h1:1,h2:2":                  "redis+cluster://u:xxxxx@h1:1,h2:2",
		"nats://u:pw@127.0.0.1:4222":                       "nats://u:xxxxx@127.0.0.1:4222",
		"redis://u:pw@h:1/path@with-at":                    "redis://u:xxxxx@h:1/path@with-at",
		"not a url":                                        "not a url",
		"https://user:key@llm.example/v1/chat?x=1#frag@at": "https://user:xxxxx@llm.example/v1/chat?x=1#frag@at",
	} {
		if got := cli.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// api runs the api binary with env until the test ends, and returns its
// base URL once it answers /readyz, and its output.
func api(t *testing.T, env ...string) (string, *testenv.Buffer) {
	t.Helper()
	port, err := redisproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(filepath.Join(binaries(t), "api"))
	cmd.Env = append(os.Environ(), append([]string{
		"LEASEHOLD_ADDR=" + addr,
		"LEASEHOLD_METRICS_ADDR=127.0.0.1:0",
		"LEASEHOLD_API_KEYS=acme:" + testKey,
		"LEASEHOLD_NATS_URL=" + testenv.NATS(t).URL(),
		"LEASEHOLD_PREFIX=" + testenv.Prefix(t),
	}, env...)...)
	out := &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	base := "http://" + addr
	testenv.Eventually(t, 30*time.Second, func() bool {
		select {
		case <-exited:
			t.Fatalf("the api exited:\n%s", out)
		default:
		}
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "the api never became ready:\n%s", out)
	return base, out
}

// submitAndGet submits an echo job through the API at base and reads it back.
func submitAndGet(t *testing.T, base string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/jobs", strings.NewReader(`{"kind":"echo"}`))
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("submit: %d %s", resp.StatusCode, body)
	}
	req, _ = http.NewRequest(http.MethodGet, base+resp.Header.Get("Location"), nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("get: %d", resp.StatusCode)
	}
}

// TestRedisDeployments runs the api binary on each form of
// LEASEHOLD_REDIS_URL that the README documents, against a real server of
// that kind, and submits and reads a job through it.
func TestRedisDeployments(t *testing.T) {
	t.Parallel()
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		addrs := testenv.Cluster(t).Addrs()
		base, _ := api(t, "LEASEHOLD_REDIS_URL=redis+cluster://"+strings.Join(addrs, ","))
		submitAndGet(t, base)
	})
	t.Run("sentinel", func(t *testing.T) {
		t.Parallel()
		sentinel := startSentinel(t, testenv.StartRedis(t).Addr())
		// The second sentinel is down: the client asks the next one.
		base, _ := api(t, "LEASEHOLD_REDIS_URL=redis+sentinel://127.0.0.1:1,"+sentinel+"/leasehold-master/0")
		submitAndGet(t, base)
	})
	t.Run("tls", func(t *testing.T) {
		t.Parallel()
		tlsPort, err := redisproc.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ca, cert, key := certificates(t)
		testenv.StartRedis(t, "--tls-port", strconv.Itoa(tlsPort), "--tls-cert-file", cert, "--tls-key-file", key,
			"--tls-ca-cert-file", ca, "--tls-auth-clients", "no")
		base, _ := api(t, "LEASEHOLD_REDIS_URL=rediss://localhost:"+strconv.Itoa(tlsPort)+"/0", "SSL_CERT_FILE="+ca)
		submitAndGet(t, base)
	})
	t.Run("no CONFIG", func(t *testing.T) {
		t.Parallel()
		srv := testenv.StartRedis(t, "--rename-command", "CONFIG", "")
		url := "LEASEHOLD_REDIS_URL=redis://" + srv.Addr() + "/0"
		cmd := exec.Command(filepath.Join(binaries(t), "api"))
		cmd.Env = append(os.Environ(), url, "LEASEHOLD_API_KEYS=acme:"+testKey, "LEASEHOLD_ADDR=127.0.0.1:0",
			"LEASEHOLD_METRICS_ADDR=127.0.0.1:0", "LEASEHOLD_NATS_URL="+testenv.NATS(t).URL())
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "LEASEHOLD_REDIS_ASSUME_NOEVICTION=1") {
			t.Fatalf("without the opt-out: %v, want an exit naming LEASEHOLD_REDIS_ASSUME_NOEVICTION=1\n%s", err, out)
		}
		base, log := api(t, url, "LEASEHOLD_REDIS_ASSUME_NOEVICTION=1")
		submitAndGet(t, base)
		if len(log.Lines("level=WARN", "NOT CHECKING")) == 0 {
			t.Errorf("the opt-out is not logged as a warning:\n%s", log)
		}
	})
}

// startSentinel runs redis-server --sentinel watching the master at addr
// under the name leasehold-master, and returns its address.
func startSentinel(t *testing.T, master string) string {
	t.Helper()
	port, err := redisproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	host, masterPort, _ := net.SplitHostPort(master)
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\n"+
		"sentinel monitor leasehold-master %s %s 1\n", port, host, masterPort)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("redis-server", conf, "--sentinel")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	testenv.Eventually(t, 10*time.Second, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, "the sentinel never listened")
	return addr
}

// certificates writes a throwaway CA and a certificate for localhost that
// it signed, and returns their files: ca, cert, key.
func certificates(t *testing.T) (ca, cert, key string) {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "leasehold test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caTmpl, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("cert.pem", "CERTIFICATE", srvDER), write("key.pem", "EC PRIVATE KEY", keyDER)
}
