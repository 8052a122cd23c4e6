//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/redisproc"
	"github.com/leasehold/leasehold/internal/testenv"
)

// jaegerConfig runs Jaeger v1.76 (the v2, collector-based binary) with
// in-memory storage, OTLP in and the query API out, on the given ports and
// on nothing else, so parallel runs do not collide.
const jaegerConfig = `
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 10000
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:%d
    grpc:
      endpoint: 127.0.0.1:%d
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%d
      http:
        endpoint: 127.0.0.1:%d
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`

// startJaeger runs the binary $LEASEHOLD_JAEGER names and returns its OTLP
// gRPC endpoint and its query API's base URL.
func startJaeger(t *testing.T) (otlp, query string) {
	t.Helper()
	bin := os.Getenv("LEASEHOLD_JAEGER")
	if bin == "" {
		t.Fatal("LEASEHOLD_JAEGER must name a jaeger v1.76.0 binary: run make test/e2e, which builds one")
	}
	var ports [4]int
	for i := range ports {
		p, err := redisproc.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = p
	}
	config := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(config, fmt.Appendf(nil, jaegerConfig, ports[0], ports[1], ports[2], ports[3]), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", config)
	var out testenv.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("jaeger's output:\n%s", out.String())
		}
	})
	query = "http://127.0.0.1:" + strconv.Itoa(ports[0])
	testenv.Eventually(t, 60*time.Second, func() bool {
		resp, err := http.Get(query + "/api/services")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	}, "jaeger's query API never answered")
	return "http://127.0.0.1:" + strconv.Itoa(ports[2]), query
}

// The parts of Jaeger's /api/traces answer the test reads.
type (
	jaegerKV struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	}
	jaegerSpan struct {
		SpanID        string `json:"spanID"`
		OperationName string `json:"operationName"`
		ProcessID     string `json:"processID"`
		References    []struct {
			RefType string `json:"refType"`
			SpanID  string `json:"spanID"`
		} `json:"references"`
		Tags []jaegerKV `json:"tags"`
		Logs []struct {
			Fields []jaegerKV `json:"fields"`
		} `json:"logs"`
	}
	jaegerTrace struct {
		TraceID   string       `json:"traceID"`
		Spans     []jaegerSpan `json:"spans"`
		Processes map[string]struct {
			ServiceName string `json:"serviceName"`
		} `json:"processes"`
	}
)

func (s jaegerSpan) tag(key string) string {
	for _, kv := range s.Tags {
		if kv.Key == key {
			return fmt.Sprint(kv.Value)
		}
	}
	return ""
}

// events lists the span's events, each as its name and its attributes.
func (s jaegerSpan) events() []string {
	var out []string
	for _, l := range s.Logs {
		var name string
		var attrs []string
		for _, f := range l.Fields {
			switch f.Key {
			case "event":
				name = fmt.Sprint(f.Value)
			case "leasehold.fencing.token":
			default:
				attrs = append(attrs, fmt.Sprintf("%s=%v", f.Key, f.Value))
			}
		}
		slices.Sort(attrs)
		if name != "renew failed" { // a loaded machine may miss a heartbeat
			out = append(out, strings.Join(append([]string{name}, attrs...), " "))
		}
	}
	return out
}

// TestJaegerReceivesTheTraceOfAJob runs the real api and worker binaries
// with OTEL_* pointing at a real Jaeger, submits a job that fails its first
// attempt and is cancelled during its second, and reads its trace back
// through Jaeger's query API.
func TestJaegerReceivesTheTraceOfAJob(t *testing.T) {
	t.Parallel()
	otlp, query := startJaeger(t)
	s := newSystem(t,
		"OTEL_EXPORTER_OTLP_ENDPOINT="+otlp,
		"OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
		"OTEL_BSP_SCHEDULE_DELAY=100", // export within 100ms, not 5s
	)
	s.start("worker")
	code, j := s.do(http.MethodPost, "/v1/jobs",
		`{"kind":"sleep","max_attempts":3,"input":{"duration":"5s","tick":"1s","fail_attempts":1}}`)
	if code != http.StatusCreated {
		t.Fatalf("submit: %d", code)
	}
	testenv.Eventually(t, 60*time.Second, func() bool {
		_, j = s.do(http.MethodGet, "/v1/jobs/"+j.ID, "")
		return j.State == "running" && j.Attempt == 2
	}, "job %s never ran its second attempt", j.ID)
	if code, _ := s.do(http.MethodPost, "/v1/jobs/"+j.ID+"/cancel", ""); code != http.StatusAccepted {
		t.Fatalf("cancel: %d", code)
	}
	s.waitState(j.ID, 30*time.Second, "cancelled")

	// The api's spans and the worker's are one trace, found by the job id.
	tags, _ := json.Marshal(map[string]string{"leasehold.job.id": j.ID})
	find := query + "/api/traces?" + url.Values{"service": {"leasehold-api"}, "tags": {string(tags)}}.Encode()
	var tr jaegerTrace
	var execs []jaegerSpan
	testenv.Eventually(t, 30*time.Second, func() bool {
		resp, err := http.Get(find)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var body struct {
			Data []jaegerTrace `json:"data"`
		}
		if json.NewDecoder(resp.Body).Decode(&body) != nil || len(body.Data) != 1 {
			return false
		}
		tr = body.Data[0]
		execs = nil
		for _, sp := range tr.Spans {
			if sp.OperationName == "process default" {
				execs = append(execs, sp)
			}
		}
		return len(execs) == 2 && slices.ContainsFunc(tr.Spans, func(sp jaegerSpan) bool { return sp.OperationName == "cancel default" })
	}, "jaeger never had the job's whole trace (query %s)", find)

	byName := map[string][]jaegerSpan{}
	for _, sp := range tr.Spans {
		byName[sp.OperationName] = append(byName[sp.OperationName], sp)
	}
	for name, service := range map[string]string{
		"POST /v1/jobs": "leasehold-api", "send default": "leasehold-api", "cancel default": "leasehold-api",
		"receive default": "leasehold-worker", "process default": "leasehold-worker", "settle default": "leasehold-worker",
	} {
		if len(byName[name]) == 0 {
			t.Errorf("no span %q in the trace", name)
			continue
		}
		if got := tr.Processes[byName[name][0].ProcessID].ServiceName; got != service {
			t.Errorf("span %q from service %q, want %q", name, got, service)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	submit := byName["send default"][0]
	if got := submit.tag("leasehold.tenant"); got != "acme" {
		t.Errorf("submit span's tenant %q, want acme", got)
	}
	parentOf := func(sp jaegerSpan) string {
		for _, r := range sp.References {
			if r.RefType == "CHILD_OF" {
				return r.SpanID
			}
		}
		return ""
	}
	if parentOf(submit) != byName["POST /v1/jobs"][0].SpanID {
		t.Errorf("the submit span is not a child of the request's span")
	}
	slices.SortFunc(execs, func(a, b jaegerSpan) int {
		return strings.Compare(a.tag("leasehold.attempt"), b.tag("leasehold.attempt"))
	})
	for _, sp := range append(execs, byName["cancel default"][0]) {
		if parentOf(sp) != submit.SpanID {
			t.Errorf("span %q (attempt %s) is not a child of the submit span", sp.OperationName, sp.tag("leasehold.attempt"))
		}
	}
	// An OpenTelemetry link is a FOLLOWS_FROM reference in Jaeger's model.
	if !slices.ContainsFunc(execs[1].References, func(r struct {
		RefType string `json:"refType"`
		SpanID  string `json:"spanID"`
	}) bool {
		return r.RefType == "FOLLOWS_FROM" && r.SpanID == execs[0].SpanID
	}) {
		t.Errorf("the second execution does not link to the first: %+v", execs[1].References)
	}
	for i, want := range [][]string{
		{"lease acquired", "finished leasehold.job.state=retrying leasehold.outcome=failed"},
		{"lease acquired", "cancel observed leasehold.cancel.path=nats", "finished leasehold.job.state=cancelled leasehold.outcome=cancelled"},
	} {
		if got := execs[i].events(); !slices.Equal(got, want) {
			t.Errorf("execution %d's events:\n%s\nwant\n%s", i+1, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	t.Logf("trace %s: %d spans", tr.TraceID, len(tr.Spans))
}
