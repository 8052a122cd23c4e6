// Package deploy_test checks Leasehold's deployment files — the Dockerfile,
// deploy/compose.yaml and deploy/k8s/*.yaml — without running them: there
// is no Docker engine or cluster where the tests run. It parses every YAML
// document and checks what Leasehold needs from its environment.
package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v4"

	"github.com/leasehold/leasehold/internal/redisproc"
	"github.com/leasehold/leasehold/internal/testenv"
	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/ratelimit"
)

// TestMain gives TestScalerMetricsExist a redis-server and NATS to run a
// real worker on.
func TestMain(m *testing.M) { testenv.Main(m, nil) }

// doc is one parsed YAML document.
type doc struct {
	file string
	m    map[string]any
}

func (d doc) kind() string { return str(get(d.m, "kind")) }
func (d doc) name() string { return str(get(d.m, "metadata", "name")) }

// yamlFiles is every YAML file under deploy/.
func yamlFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ext := filepath.Ext(path); !e.IsDir() && (ext == ".yaml" || ext == ".yml") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no YAML files under deploy/")
	}
	return files
}

// parse reads every document of a (possibly multi-document) YAML file.
func parse(t *testing.T, file string) []doc {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var docs []doc
	for i := 0; ; i++ {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", file, i, err)
		}
		if v == nil {
			continue // an empty document, e.g. a trailing ---
		}
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%s: document %d is a %T, want a mapping", file, i, v)
		}
		docs = append(docs, doc{file: file, m: m})
	}
	return docs
}

// allDocs parses every YAML document under deploy/.
func allDocs(t *testing.T) []doc {
	t.Helper()
	var docs []doc
	for _, f := range yamlFiles(t) {
		docs = append(docs, parse(t, f)...)
	}
	return docs
}

func k8sDocs(t *testing.T) []doc {
	t.Helper()
	var out []doc
	for _, d := range allDocs(t) {
		if strings.HasPrefix(filepath.ToSlash(d.file), "k8s/") {
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		t.Fatal("no documents under deploy/k8s")
	}
	return out
}

func find(t *testing.T, docs []doc, kind, name string) doc {
	t.Helper()
	for _, d := range docs {
		if d.kind() == kind && d.name() == name {
			return d
		}
	}
	t.Fatalf("no %s %q in deploy/k8s", kind, name)
	return doc{}
}

func compose(t *testing.T) map[string]any {
	t.Helper()
	docs := parse(t, "compose.yaml")
	if len(docs) != 1 {
		t.Fatalf("compose.yaml: %d documents, want 1", len(docs))
	}
	return docs[0].m
}

// get walks nested mappings; nil when a step is missing.
func get(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func str(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

// words is a command as a list of words: a YAML list or a string.
func words(v any) []string {
	switch v := v.(type) {
	case string:
		return strings.Fields(v)
	case []any:
		var out []string
		for _, w := range v {
			out = append(out, str(w))
		}
		return out
	}
	return nil
}

// composeEnv is a Compose service's environment, a mapping or a list.
func composeEnv(svc any) map[string]string {
	out := map[string]string{}
	switch env := get(svc, "environment").(type) {
	case map[string]any:
		for k, v := range env {
			out[k] = str(v)
		}
	case []any:
		for _, kv := range env {
			k, v, _ := strings.Cut(str(kv), "=")
			out[k] = v
		}
	}
	return out
}

func duration(t *testing.T, what, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%s: %q is not a duration: %v", what, s, err)
	}
	return d
}

// Worker defaults from cmd/worker, used when a file does not set them.
const (
	defaultGrace     = 30 * time.Second
	defaultHeartbeat = 2 * time.Second
	defaultLeaseTTL  = 10 * time.Second
	// graceMargin is the least time a worker gets after its shutdown grace
	// to hand its remaining jobs back before SIGKILL.
	graceMargin = 5 * time.Second
)

func orDefault(t *testing.T, env map[string]string, key string, def time.Duration) time.Duration {
	t.Helper()
	if s, ok := env[key]; ok && s != "" {
		return duration(t, key, s)
	}
	return def
}

func TestYAMLWellFormed(t *testing.T) {
	for _, f := range yamlFiles(t) {
		if docs := parse(t, f); len(docs) == 0 {
			t.Errorf("%s: no documents", f)
		}
	}
}

var envName = regexp.MustCompile(`LEASEHOLD_[A-Z0-9_]+`)

// documented is every LEASEHOLD_* variable named in the configuration
// table of docs/operations.md (the rows of its *Configuration* section
// only: variables mentioned elsewhere do not count).
func documented(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(b), "\n## Configuration\n")
	section, _, _ = strings.Cut(section, "\n## ")
	names := map[string]bool{}
	for line := range strings.Lines(section) {
		if strings.HasPrefix(strings.TrimSpace(line), "|") {
			for _, n := range envName.FindAllString(line, -1) {
				names[n] = true
			}
		}
	}
	if len(names) < 5 {
		t.Fatalf("docs/operations.md: found only %v in the configuration table; has its format changed?", names)
	}
	return names
}

// TestEnvNamesDocumented fails on any LEASEHOLD_* name in the deployment
// files that the configuration table of docs/operations.md does not list: a typo would
// otherwise be silently ignored by the binaries.
func TestEnvNamesDocumented(t *testing.T) {
	known := documented(t)
	files := append(yamlFiles(t), filepath.Join("..", "Dockerfile"))
	used := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range envName.FindAllString(string(b), -1) {
			used++
			if !known[n] {
				t.Errorf("%s: %s is not in the configuration table of docs/operations.md", f, n)
			}
		}
	}
	if used == 0 {
		t.Error("no LEASEHOLD_* variables found in the deployment files")
	}
}

func TestComposeServices(t *testing.T) {
	c := compose(t)
	for _, name := range []string{"redis", "nats", "api", "worker", "jaeger"} {
		if get(c, "services", name) == nil {
			t.Errorf("compose.yaml: no service %q", name)
		}
	}
}

func TestComposeRedis(t *testing.T) {
	cmd := " " + strings.Join(words(get(compose(t), "services", "redis", "command")), " ") + " "
	for _, want := range []string{" --maxmemory-policy noeviction ", " --appendonly yes ", " --stream-node-max-bytes 1024 ",
		" --zset-max-listpack-entries 32 "} {
		if !strings.Contains(cmd, want) {
			t.Errorf("compose.yaml: redis command %q lacks %q", cmd, strings.TrimSpace(want))
		}
	}
	if words(get(compose(t), "services", "redis", "healthcheck", "test")) == nil {
		t.Error("compose.yaml: redis has no healthcheck")
	}
}

func TestComposeBinaries(t *testing.T) {
	c := compose(t)
	for _, svc := range []string{"api", "worker"} {
		s := get(c, "services", svc)
		if cmd := words(get(s, "command")); len(cmd) == 0 || cmd[0] != "/usr/local/bin/"+svc {
			t.Errorf("compose.yaml: %s command %q, want /usr/local/bin/%s", svc, cmd, svc)
		}
		env := composeEnv(s)
		for _, k := range []string{"LEASEHOLD_REDIS_URL", "LEASEHOLD_NATS_URL", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
			if env[k] == "" {
				t.Errorf("compose.yaml: %s does not set %s", svc, k)
			}
		}
		// OTLP's default protocol is http/protobuf, on 4318: 4317 is gRPC.
		if strings.HasSuffix(env["OTEL_EXPORTER_OTLP_ENDPOINT"], ":4317") && env["OTEL_EXPORTER_OTLP_PROTOCOL"] != "grpc" {
			t.Errorf("compose.yaml: %s sends OTLP to gRPC's port 4317 without OTEL_EXPORTER_OTLP_PROTOCOL=grpc", svc)
		}
		if str(get(s, "depends_on", "redis", "condition")) != "service_healthy" {
			t.Errorf("compose.yaml: %s does not wait for redis to be healthy", svc)
		}
	}
	api := composeEnv(get(c, "services", "api"))
	if api["LEASEHOLD_API_KEYS"] == "" {
		t.Error("compose.yaml: api has no LEASEHOLD_API_KEYS")
	}
	if !strings.HasPrefix(api["LEASEHOLD_ADDR"], "0.0.0.0:") {
		t.Errorf("compose.yaml: api LEASEHOLD_ADDR %q does not listen on all interfaces", api["LEASEHOLD_ADDR"])
	}
}

// The shipped files bound every tenant: a submission rate and a cap of
// jobs not ended, the same in the API and the worker (which fires
// schedules with them).
func TestTenantBoundsShip(t *testing.T) {
	c := compose(t)
	docs := k8sDocs(t)
	for where, env := range map[string]map[string]string{
		"compose.yaml api":    composeEnv(get(c, "services", "api")),
		"compose.yaml worker": composeEnv(get(c, "services", "worker")),
		"k8s api":             podEnv(t, docs, find(t, docs, "Deployment", "leasehold-api")),
		"k8s worker":          podEnv(t, docs, find(t, docs, "Deployment", "leasehold-worker")),
	} {
		if _, err := ratelimit.ParseRate(env["LEASEHOLD_RATE"]); err != nil {
			t.Errorf("%s: LEASEHOLD_RATE %q: %v", where, env["LEASEHOLD_RATE"], err)
		}
		if n, err := strconv.Atoi(env["LEASEHOLD_TENANT_MAX_JOBS"]); err != nil || n <= 0 {
			t.Errorf("%s: LEASEHOLD_TENANT_MAX_JOBS %q, want a cap above 0", where, env["LEASEHOLD_TENANT_MAX_JOBS"])
		}
		if n, err := strconv.ParseInt(env["LEASEHOLD_TENANT_MAX_RETAINED_BYTES"], 10, 64); err != nil || n <= 0 {
			t.Errorf("%s: LEASEHOLD_TENANT_MAX_RETAINED_BYTES %q, want a quota above 0", where, env["LEASEHOLD_TENANT_MAX_RETAINED_BYTES"])
		}
		if strings.HasSuffix(where, "api") {
			limits, err := job.ParseLimits(env["LEASEHOLD_LIMITS"])
			if kl, ok := limits["model:*"]; err != nil || !ok || kl.Budget.PerTenant <= 0 {
				t.Errorf("%s: LEASEHOLD_LIMITS %q (%v), want model:* with a per_tenant share", where, env["LEASEHOLD_LIMITS"], err)
			}
			if n, err := strconv.Atoi(env["LEASEHOLD_TENANT_MAX_SCHEDULES"]); err != nil || n <= 0 {
				t.Errorf("%s: LEASEHOLD_TENANT_MAX_SCHEDULES %q, want a cap above 0", where, env["LEASEHOLD_TENANT_MAX_SCHEDULES"])
			}
		}
		for _, k := range []string{"LEASEHOLD_RATE", "LEASEHOLD_TENANT_MAX_JOBS", "LEASEHOLD_TENANT_MAX_RETAINED_BYTES"} {
			if api := composeEnv(get(c, "services", "api"))[k]; strings.HasPrefix(where, "compose") && env[k] != api {
				t.Errorf("%s: %s %q, the API's is %q", where, k, env[k], api)
			}
		}
	}
}

func TestComposeWorkerGrace(t *testing.T) {
	w := get(compose(t), "services", "worker")
	env := composeEnv(w)
	grace := orDefault(t, env, "LEASEHOLD_SHUTDOWN_GRACE", defaultGrace)
	stop := duration(t, "worker stop_grace_period", str(get(w, "stop_grace_period")))
	if stop < grace+graceMargin {
		t.Errorf("compose.yaml: worker stop_grace_period %v, want more than LEASEHOLD_SHUTDOWN_GRACE %v + %v", stop, grace, graceMargin)
	}
	checkLease(t, "compose.yaml worker", env)
	if n, _ := strconv.Atoi(str(get(w, "deploy", "replicas"))); n < 2 {
		t.Errorf("compose.yaml: worker deploy.replicas %v, want at least 2", get(w, "deploy", "replicas"))
	}
}

// checkLease: the lease TTL covers at least two heartbeats.
func checkLease(t *testing.T, where string, env map[string]string) {
	t.Helper()
	hb := orDefault(t, env, "LEASEHOLD_HEARTBEAT", defaultHeartbeat)
	ttl := orDefault(t, env, "LEASEHOLD_LEASE_TTL", defaultLeaseTTL)
	if ttl < 2*hb {
		t.Errorf("%s: LEASEHOLD_LEASE_TTL %v covers fewer than two heartbeats of %v", where, ttl, hb)
	}
}

func containers(d doc) []any {
	return append(list(get(d.m, "spec", "template", "spec", "initContainers")),
		list(get(d.m, "spec", "template", "spec", "containers"))...)
}

// podEnv is the environment a Deployment's first container gets from its
// ConfigMaps (envFrom) and literal env values.
func podEnv(t *testing.T, docs []doc, d doc) map[string]string {
	t.Helper()
	env := map[string]string{}
	c := list(get(d.m, "spec", "template", "spec", "containers"))[0]
	for _, src := range list(get(c, "envFrom")) {
		if name := str(get(src, "configMapRef", "name")); name != "" {
			for k, v := range get(find(t, docs, "ConfigMap", name).m, "data").(map[string]any) {
				env[k] = str(v)
			}
		}
	}
	for _, e := range list(get(c, "env")) {
		if v := get(e, "value"); v != nil {
			env[str(get(e, "name"))] = str(v)
		}
	}
	return env
}

func TestK8sWorkerGrace(t *testing.T) {
	docs := k8sDocs(t)
	w := find(t, docs, "Deployment", "leasehold-worker")
	env := podEnv(t, docs, w)
	grace := orDefault(t, env, "LEASEHOLD_SHUTDOWN_GRACE", defaultGrace)
	tgps := get(w.m, "spec", "template", "spec", "terminationGracePeriodSeconds")
	secs, err := strconv.Atoi(str(tgps))
	if err != nil {
		t.Fatalf("worker.yaml: terminationGracePeriodSeconds %v: %v", tgps, err)
	}
	if got := time.Duration(secs) * time.Second; got < grace+graceMargin {
		t.Errorf("worker.yaml: terminationGracePeriodSeconds %v, want more than LEASEHOLD_SHUTDOWN_GRACE %v + %v", got, grace, graceMargin)
	}
	checkLease(t, "k8s worker", env)
}

func TestK8sProbes(t *testing.T) {
	docs := k8sDocs(t)
	api := list(get(find(t, docs, "Deployment", "leasehold-api").m, "spec", "template", "spec", "containers"))[0]
	if p := str(get(api, "readinessProbe", "httpGet", "path")); p != "/readyz" {
		t.Errorf("api.yaml: readiness probe path %q, want /readyz", p)
	}
	if p := str(get(api, "livenessProbe", "httpGet", "path")); p != "/healthz" {
		t.Errorf("api.yaml: liveness probe path %q, want /healthz", p)
	}
	// The worker serves its probes and /metrics on LEASEHOLD_METRICS_ADDR,
	// which must listen beyond localhost on the port the probes and the
	// scrape annotation name.
	w := find(t, docs, "Deployment", "leasehold-worker")
	worker := containers(w)[0]
	addr := podEnv(t, docs, w)["LEASEHOLD_METRICS_ADDR"]
	host, port, err := net.SplitHostPort(addr)
	if err != nil || (host != "0.0.0.0" && host != "") {
		t.Errorf("k8s worker: LEASEHOLD_METRICS_ADDR %q, want 0.0.0.0:<port> so probes and Prometheus reach it", addr)
	}
	var named string
	for _, p := range list(get(worker, "ports")) {
		if str(get(p, "containerPort")) == port {
			named = str(get(p, "name"))
		}
	}
	if named == "" {
		t.Errorf("worker.yaml: no container port %s (LEASEHOLD_METRICS_ADDR)", port)
	}
	for probe, path := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
		if p := str(get(worker, probe, "httpGet", "path")); p != path {
			t.Errorf("worker.yaml: %s path %q, want %s", probe, p, path)
		}
		if p := str(get(worker, probe, "httpGet", "port")); p != named && p != port {
			t.Errorf("worker.yaml: %s port %q, want %s", probe, p, port)
		}
	}
	if p := str(get(w.m, "spec", "template", "metadata", "annotations", "prometheus.io/port")); p != port {
		t.Errorf("worker.yaml: prometheus.io/port %q, want %s", p, port)
	}
	for _, d := range docs {
		if d.kind() == "Service" && strings.Contains(str(get(d.m, "spec", "selector")), "worker") {
			t.Errorf("%s: Service %q selects workers, which serve nothing", d.file, d.name())
		}
	}
}

func TestK8sCommands(t *testing.T) {
	docs := k8sDocs(t)
	for _, bin := range []string{"api", "worker"} {
		c := list(get(find(t, docs, "Deployment", "leasehold-"+bin).m, "spec", "template", "spec", "containers"))[0]
		if cmd := words(get(c, "command")); len(cmd) == 0 || cmd[0] != "/usr/local/bin/"+bin {
			t.Errorf("%s.yaml: command %q, want /usr/local/bin/%s", bin, cmd, bin)
		}
	}
}

// TestNonRoot: every pod runs as a non-root user with a read-only root
// file system and no privilege escalation.
func TestNonRoot(t *testing.T) {
	deployments := 0
	for _, d := range k8sDocs(t) {
		if d.kind() != "Deployment" {
			continue
		}
		deployments++
		pod := get(d.m, "spec", "template", "spec", "securityContext")
		for _, c := range containers(d) {
			where := fmt.Sprintf("%s: %s container %s", d.file, d.name(), str(get(c, "name")))
			sc := get(c, "securityContext")
			if get(sc, "runAsNonRoot") != true && get(pod, "runAsNonRoot") != true {
				t.Errorf("%s: runAsNonRoot not set", where)
			}
			for _, u := range []any{get(sc, "runAsUser"), get(pod, "runAsUser")} {
				if u != nil && str(u) == "0" {
					t.Errorf("%s: runAsUser 0", where)
				}
			}
			if get(sc, "readOnlyRootFilesystem") != true {
				t.Errorf("%s: readOnlyRootFilesystem not true", where)
			}
			if get(sc, "allowPrivilegeEscalation") != false {
				t.Errorf("%s: allowPrivilegeEscalation not false", where)
			}
			if get(c, "resources", "requests") == nil {
				t.Errorf("%s: no resource requests", where)
			}
		}
	}
	if deployments < 2 {
		t.Errorf("found %d Deployments, want api and worker", deployments)
	}
	// Compose: the image's USER (see TestDockerfile) is the only user; no
	// service may override it with root.
	for name, svc := range get(compose(t), "services").(map[string]any) {
		if u := str(get(svc, "user")); u == "0" || strings.HasPrefix(u, "root") || strings.HasPrefix(u, "0:") {
			t.Errorf("compose.yaml: service %s runs as %q", name, u)
		}
	}
}

// TestK8sReferences: every ConfigMap, Secret key, HPA target and PDB
// selector refers to something these files define.
func TestK8sReferences(t *testing.T) {
	docs := k8sDocs(t)
	for _, d := range docs {
		if d.kind() != "Deployment" {
			continue
		}
		for _, c := range containers(d) {
			for _, src := range list(get(c, "envFrom")) {
				if name := str(get(src, "configMapRef", "name")); name != "" {
					find(t, docs, "ConfigMap", name)
				}
			}
			// Secrets are created out of band (TestNoKeyShips): a reference
			// names the one Secret config.yaml tells the operator to create.
			for _, e := range list(get(c, "env")) {
				ref := get(e, "valueFrom", "secretKeyRef")
				if ref != nil && str(get(ref, "name")) != "leasehold-secrets" {
					t.Errorf("%s: env %s refers to Secret %q, want leasehold-secrets", d.file, str(get(e, "name")), str(get(ref, "name")))
				}
			}
		}
	}
	hpa := find(t, docs, "HorizontalPodAutoscaler", "leasehold-worker")
	if v := str(get(hpa.m, "apiVersion")); v != "autoscaling/v2" {
		t.Errorf("hpa.yaml: apiVersion %q, want autoscaling/v2", v)
	}
	find(t, docs, str(get(hpa.m, "spec", "scaleTargetRef", "kind")), str(get(hpa.m, "spec", "scaleTargetRef", "name")))
	var pdbs []string
	for _, d := range docs {
		if d.kind() != "PodDisruptionBudget" {
			continue
		}
		app := str(get(d.m, "spec", "selector", "matchLabels", "app.kubernetes.io/name"))
		dep := find(t, docs, "Deployment", app)
		if got := str(get(dep.m, "spec", "template", "metadata", "labels", "app.kubernetes.io/name")); got != app {
			t.Errorf("%s: PDB %s selects %q, pods are labelled %q", d.file, d.name(), app, got)
		}
		pdbs = append(pdbs, app)
	}
	for _, want := range []string{"leasehold-api", "leasehold-worker"} {
		if !slices.Contains(pdbs, want) {
			t.Errorf("no PodDisruptionBudget for %s", want)
		}
	}
}

// TestComposePortsOnLoopback: Compose publishes no port on every host
// interface. Redis, NATS and Jaeger there have no password, so a port on
// 0.0.0.0 would hand the job store to anyone who can reach the host.
func TestComposePortsOnLoopback(t *testing.T) {
	published := 0
	for name, svc := range get(compose(t), "services").(map[string]any) {
		for _, p := range list(get(svc, "ports")) {
			published++
			host := str(get(p, "host_ip")) // the long syntax
			if s, ok := p.(string); ok {
				// The short syntax: [host_ip:]host_port:container_port[/proto].
				if parts := strings.Split(s, ":"); len(parts) == 3 {
					host = parts[0]
				}
			}
			if host != "127.0.0.1" && host != "[::1]" && host != "::1" {
				t.Errorf("compose.yaml: service %s publishes %v on every interface, want 127.0.0.1:...", name, p)
			}
		}
	}
	for _, name := range []string{"redis", "nats"} {
		if get(compose(t), "services", name, "network_mode") == "host" {
			t.Errorf("compose.yaml: %s on the host's network", name)
		}
	}
	if published == 0 {
		t.Error("compose.yaml publishes no port at all; has its format changed?")
	}
}

// placeholderKey finds what reads as an example key in a deployment file.
var placeholderKey = regexp.MustCompile(`(?i)replace[-_]?me|change[-_]?me|example[-_]?(admin[-_]?)?key`)

// TestNoKeyShips: the deployment files give no API key the API would start
// with. Compose requires LEASEHOLD_API_KEYS from the shell or deploy/.env
// (no fallback); Kubernetes reads it from a Secret these files do not
// define, and the API pods do not start without it.
func TestNoKeyShips(t *testing.T) {
	api := composeEnv(get(compose(t), "services", "api"))
	if v := api["LEASEHOLD_API_KEYS"]; !strings.HasPrefix(v, "${LEASEHOLD_API_KEYS:?") {
		t.Errorf("compose.yaml: LEASEHOLD_API_KEYS is %q, want ${LEASEHOLD_API_KEYS:?...}: required, with no fallback", v)
	}
	docs := k8sDocs(t)
	for _, d := range docs {
		if d.kind() == "Secret" {
			t.Errorf("%s: Secret %s ships with the manifests; create it out of band", d.file, d.name())
		}
		data, _ := get(d.m, "data").(map[string]any)
		for k := range data {
			if d.kind() == "ConfigMap" && strings.Contains(k, "KEY") {
				t.Errorf("%s: ConfigMap %s holds %s", d.file, d.name(), k)
			}
		}
	}
	c := list(get(find(t, docs, "Deployment", "leasehold-api").m, "spec", "template", "spec", "containers"))[0]
	from := false
	for _, e := range list(get(c, "env")) {
		if str(get(e, "name")) == "LEASEHOLD_API_KEYS" {
			ref := get(e, "valueFrom", "secretKeyRef")
			from = ref != nil && get(ref, "optional") != true && get(e, "value") == nil
		}
	}
	if !from {
		t.Error("api.yaml: LEASEHOLD_API_KEYS does not come from a required secretKeyRef")
	}
	for _, f := range yamlFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if m := placeholderKey.Find(b); m != nil {
			t.Errorf("%s: %q reads as a placeholder key", f, m)
		}
	}
}

// TestDockerfile parses the Dockerfile's text: a golang:1.26 build stage
// making static, trimmed binaries, and a distroless non-root final stage.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var froms []string
	var final []string // instructions of the final stage
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if strings.EqualFold(fields[0], "FROM") {
			image := ""
			for _, f := range fields[1:] {
				if !strings.HasPrefix(f, "--") {
					image = f
					break
				}
			}
			froms = append(froms, image)
			final = nil
		}
		final = append(final, line)
	}
	if len(froms) < 2 {
		t.Fatalf("Dockerfile: %d stages, want a multi-stage build", len(froms))
	}
	if froms[0] != "golang:1.26" {
		t.Errorf("Dockerfile: build stage FROM %q, want golang:1.26", froms[0])
	}
	if last := froms[len(froms)-1]; last != "gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("Dockerfile: final stage FROM %q, want gcr.io/distroless/static-debian12:nonroot", last)
	}
	text := string(b)
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", `-ldflags "-s -w"`, "./cmd/api", "./cmd/worker"} {
		if !strings.Contains(text, want) {
			t.Errorf("Dockerfile: no %s", want)
		}
	}
	// The :nonroot base already runs as uid 65532; an explicit USER is
	// optional but must not be root.
	var copied bool
	for _, in := range final {
		f := strings.Fields(in)
		switch strings.ToUpper(f[0]) {
		case "COPY":
			copied = copied || (slices.Contains(f, "/usr/local/bin/") && strings.Contains(in, "api") && strings.Contains(in, "worker"))
		case "USER":
			if u := f[1]; u == "0" || strings.HasPrefix(u, "0:") || strings.HasPrefix(u, "root") {
				t.Errorf("Dockerfile: final stage runs as %q", u)
			}
		}
	}
	if !copied {
		t.Error("Dockerfile: final stage does not copy api and worker to /usr/local/bin/")
	}
}

var metricName = regexp.MustCompile(`leasehold_[a-z0-9_]+`)

// scalerMetrics is every Leasehold metric an autoscaler in deploy/k8s reads:
// the HPA's external and pods metrics and the ScaledObject's Prometheus
// queries.
func scalerMetrics(t *testing.T, docs []doc) map[string]string {
	t.Helper()
	names := map[string]string{} // name -> where it is read
	hpa := find(t, docs, "HorizontalPodAutoscaler", "leasehold-worker")
	for _, m := range list(get(hpa.m, "spec", "metrics")) {
		if str(get(m, "type")) == "Resource" {
			t.Errorf("hpa.yaml: scales on the resource %s; LLM workers idle on CPU while they wait", str(get(m, "resource", "name")))
		}
		for _, kind := range []string{"external", "pods"} {
			if n := str(get(m, kind, "metric", "name")); n != "" {
				names[n] = "hpa.yaml " + kind
			}
		}
	}
	so := find(t, docs, "ScaledObject", "leasehold-worker")
	find(t, docs, str(get(so.m, "spec", "scaleTargetRef", "kind")), str(get(so.m, "spec", "scaleTargetRef", "name")))
	for _, tr := range list(get(so.m, "spec", "triggers")) {
		if str(get(tr, "type")) != "prometheus" {
			t.Errorf("%s: trigger %s is not a prometheus scaler", so.file, str(get(tr, "name")))
		}
		for _, n := range metricName.FindAllString(str(get(tr, "metadata", "query")), -1) {
			names[n] = so.file + " trigger " + str(get(tr, "name"))
		}
	}
	if len(names) < 2 {
		t.Fatalf("the autoscalers read %v; want the queue depth and the workers' utilization", names)
	}
	return names
}

// TestScalerMetricsExist runs a real worker and reads its /metrics: every
// metric the HPA and the ScaledObject scale on must be in it, under the
// name Prometheus gives it, or the autoscaler silently never scales.
func TestScalerMetricsExist(t *testing.T) {
	names := scalerMetrics(t, k8sDocs(t))

	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/leasehold/leasehold/cmd/worker").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	port, err := redisproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(filepath.Join(bin, "worker"))
	cmd.Env = append(os.Environ(), "LEASEHOLD_REDIS_URL=redis://"+testenv.Redis(t).Addr()+"/0",
		"LEASEHOLD_NATS_URL="+testenv.NATS(t).URL(), "LEASEHOLD_PREFIX="+testenv.Prefix(t), "LEASEHOLD_METRICS_ADDR="+addr)
	out := &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})

	var body string
	testenv.Eventually(t, 30*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		body = string(b)
		return err == nil && resp.StatusCode == http.StatusOK && strings.Contains(body, "leasehold_queue_depth")
	}, "the worker's /metrics never showed leasehold_queue_depth\n%s", out)
	exported := map[string]bool{}
	for line := range strings.Lines(body) {
		if !strings.HasPrefix(line, "#") {
			exported[strings.TrimRight(strings.SplitN(strings.SplitN(line, "{", 2)[0], " ", 2)[0], "\n")] = true
		}
	}
	for name, where := range names {
		if !exported[name] {
			t.Errorf("%s reads %s, which the worker's /metrics does not export", where, name)
		}
	}
}
