package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/redisproc"
	"github.com/leasehold/leasehold/internal/testenv"
)

// A step of docs/getting-started.md: a fenced block whose info string is
// "sh test" (run it, it must exit 0) or "sh test background" (start it,
// as in another terminal, and leave it running), with the "text output"
// block that follows it, if any. Each line of that output must appear in
// what the step printed, in order; "…" in a line stands for any text. A
// "text output background" block after a step holds lines that the last
// background step (the other terminal) prints once the step has run.
type step struct {
	line       int // of the block's opening fence, for messages
	script     string
	background bool
	output     []string
	elsewhere  []string // the "text output background" lines
}

// guideSteps reads the steps of the guide at path.
func guideSteps(t *testing.T, path string) []step {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		steps   []step
		info    string // of the open block; "" outside one
		body    []string
		start   int
		inBlock bool
		prev    = -1 // the step a "text output" block may follow (prose may come between); -1 none
	)
	for i, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "```") {
			if inBlock {
				body = append(body, l)
			}
			continue
		}
		if !inBlock {
			inBlock, info, body, start = true, strings.TrimSpace(strings.TrimPrefix(l, "```")), nil, i+1
			continue
		}
		inBlock = false
		switch info {
		case "sh test", "sh test background":
			steps = append(steps, step{line: start, script: strings.Join(body, "\n"), background: info == "sh test background"})
			prev = len(steps) - 1
		case "text output":
			if prev < 0 || steps[prev].output != nil {
				t.Fatalf("%s:%d: an output block follows no step", path, start)
			}
			steps[prev].output = body
		case "text output background":
			if prev < 0 || steps[prev].elsewhere != nil || !slices.ContainsFunc(steps[:prev], func(s step) bool { return s.background }) {
				t.Fatalf("%s:%d: a background output block follows no step, or no background step comes before it", path, start)
			}
			steps[prev].elsewhere = body
		default:
			prev = -1
		}
	}
	if inBlock {
		t.Fatalf("%s:%d: a block is never closed", path, start)
	}
	return steps
}

// makeRunStep matches a step that starts the dev mode, with the environment
// it is given.
var makeRunStep = regexp.MustCompile(`^((?:[A-Z_]+=\S+\s+)*)make run$`)

// bannerValues are the values of a banner that a reader's differ in: the
// guide shows its own, which the test replaces with the running ones.
var bannerValues = []*regexp.Regexp{
	regexp.MustCompile(`API +(\S+)`),
	regexp.MustCompile(`key (\S+)\)`),
	regexp.MustCompile(`Admin +key (\S+)`),
	regexp.MustCompile(`Redis +(\S+)`),
	regexp.MustCompile(`NATS +(\S+)`),
}

func bannerFields(t *testing.T, banner string) []string {
	t.Helper()
	var fields []string
	for _, re := range bannerValues {
		m := re.FindStringSubmatch(banner)
		if m == nil {
			t.Fatalf("no %s in the banner:\n%s", re, banner)
		}
		fields = append(fields, m[1])
	}
	return fields
}

// guide runs the guide's steps as a reader does: one shell whose
// variables carry from step to step, at the repository's root, beside a
// dev mode started as make run starts it.
type guide struct {
	t          *testing.T
	bin        string            // the built leasehold
	data       string            // the dev mode's working directory; its data in .dev there
	addr       string            // the API's, the same at every start as make run's
	env        []string          // the shell's, carried from step to step
	shown      []string          // the guide's banner values
	ports      map[string]string // the ports the guide's servers listen on, to the test's
	dev        *process
	background []*process
}

// process is a process the guide started, in a process group of its own
// as a terminal's foreground job is.
type process struct {
	cmd  *exec.Cmd
	out  testenv.Buffer
	done chan struct{} // closed when it has exited, with err
	err  error
}

func (g *guide) start(cmd *exec.Cmd) *process {
	g.t.Helper()
	p := &process{cmd: cmd, done: make(chan struct{})}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = &p.out, &p.out
	if err := cmd.Start(); err != nil {
		g.t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p
}

// stop sends the process group SIGINT, as Ctrl-C does, and returns how
// it exited; past within, it is killed.
func (p *process) stop(within time.Duration) error {
	if p.exited() {
		return p.err
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGINT)
	select {
	case <-p.done:
		return p.err
	case <-time.After(within):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("still running %v after Ctrl-C", within)
	}
}

// exited says whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// substitute puts the running values in place of the guide's: the
// banner's, and its servers' ports.
func (g *guide) substitute(s string) string {
	if g.dev != nil {
		for i, v := range bannerFields(g.t, g.dev.out.String()) {
			s = strings.ReplaceAll(s, g.shown[i], v)
		}
	}
	for shown, port := range g.ports {
		s = regexp.MustCompile(`\b`+shown+`\b`).ReplaceAllString(s, port)
	}
	return s
}

// script is a step's script as the test runs it: substituted, and with
// the dev mode's data directory, .dev at the repository's root in the
// guide, where the test keeps it.
func (g *guide) script(st step) string {
	return strings.ReplaceAll(g.substitute(st.script), ".dev/", filepath.Join(g.data, ".dev")+"/")
}

// contains says whether want's lines appear in got, in order.
func (g *guide) contains(got string, want []string) bool {
	lines := strings.Split(got, "\n")
	for _, w := range want {
		if strings.TrimSpace(w) == "…" || w == "" {
			continue
		}
		parts := strings.Split(regexp.QuoteMeta(g.substitute(strings.TrimRight(w, " "))), "…")
		re := regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
		for len(lines) > 0 && !re.MatchString(strings.TrimRight(lines[0], " \r")) {
			lines = lines[1:]
		}
		if len(lines) == 0 {
			return false
		}
		lines = lines[1:]
	}
	return true
}

// makeRun stops the running dev mode as Ctrl-C does, checking that it
// exits 0, and starts the built one with env, as make run does.
func (g *guide) makeRun(st step, env string) {
	g.t.Helper()
	if g.dev != nil {
		if err := g.dev.stop(60 * time.Second); err != nil {
			g.t.Fatalf("line %d: Ctrl-C on the dev mode: %v\n%s", st.line, err, g.dev.out.String())
		}
	}
	cmd := exec.Command(g.bin, "dev", "--addr", g.addr, "--metrics-addr", "127.0.0.1:0", "--data", ".dev")
	cmd.Dir = g.data
	cmd.Env = append(cleanEnv(), strings.Fields(g.substitute(env))...)
	g.dev = g.start(cmd)
	testenv.Eventually(g.t, 60*time.Second, func() bool {
		if g.dev.exited() {
			g.t.Fatalf("line %d: the dev mode exited: %v\n%s", st.line, g.dev.err, g.dev.out.String())
		}
		return strings.Contains(g.dev.out.String(), "Ctrl-C stops everything.")
	}, "line %d: the dev mode printed no banner", st.line)
	if !g.contains(g.dev.out.String(), st.output) {
		g.t.Fatalf("line %d: the banner has not the guide's lines %q:\n%s", st.line, st.output, g.dev.out.String())
	}
}

// shell runs a step's script in the carried environment; the variables
// it sets are carried on.
func (g *guide) shell(st step) {
	g.t.Helper()
	state := filepath.Join(g.t.TempDir(), "env")
	script := "set -eo pipefail -a\n" + g.script(st) + "\nenv -0 >" + state
	if st.background {
		script = "set -a\n" + g.script(st)
	}
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = repoPath()
	cmd.Env = g.env
	if st.background {
		p := g.start(cmd)
		g.background = append(g.background, p)
		testenv.Eventually(g.t, 120*time.Second, func() bool {
			if p.exited() {
				g.t.Fatalf("line %d: exited: %v\n%s", st.line, p.err, p.out.String())
			}
			return g.contains(p.out.String(), st.output)
		}, "line %d: never printed %q", st.line, st.output)
		return
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		g.t.Fatalf("line %d: %v\n%s\n%s", st.line, err, g.substitute(st.script), out)
	}
	if !g.contains(string(out), st.output) {
		g.t.Fatalf("line %d: the output has not the guide's lines %q:\n%s", st.line, st.output, out)
	}
	b, err := os.ReadFile(state)
	if err != nil {
		g.t.Fatal(err)
	}
	g.env = strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// cleanEnv is the test's environment without the variables Leasehold
// reads, as a reader's shell is.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASEHOLD_") {
			env = append(env, kv)
		}
	}
	return env
}

// TestGettingStarted runs every command of docs/getting-started.md in
// order, against the built leasehold and a redis-server: each must exit
// 0, print the output the guide shows, and the dev mode must stop on
// Ctrl-C with exit 0. The guide's keys, ports and addresses are replaced
// by the running ones; its commands are otherwise run as written.
func TestGettingStarted(t *testing.T) {
	t.Parallel()
	if !redisproc.Installed() {
		t.Fatal(redisproc.InstallHint)
	}
	for _, tool := range []string{"jq", "python3", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v (apt-get install -y jq python3 curl)", tool, err)
		}
	}
	path := repoPath("docs", "getting-started.md")
	steps := guideSteps(t, path)
	if len(steps) == 0 || !makeRunStep.MatchString(steps[0].script) {
		t.Fatalf("%s: the guide's first step is not make run", path)
	}
	bin := filepath.Join(t.TempDir(), "leasehold")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/leasehold/leasehold/cmd/leasehold").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	api, err := redisproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ports := map[string]string{}
	for _, shown := range []string{"8000", "8001"} { // the handler's, the webhook receiver's
		port, err := redisproc.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[shown] = strconv.Itoa(port)
	}
	gobin := t.TempDir() // where the guide's go install puts the CLI
	g := &guide{
		t: t, bin: bin, data: t.TempDir(), addr: "127.0.0.1:" + strconv.Itoa(api), ports: ports,
		shown: bannerFields(t, strings.Join(steps[0].output, "\n")),
		env: append(cleanEnv(), "GOBIN="+gobin, "PATH="+gobin+string(os.PathListSeparator)+os.Getenv("PATH"),
			"LEASEHOLD_METRICS_ADDR=127.0.0.1:0"), // a worker the guide starts: a free port, whatever else runs
	}
	t.Cleanup(func() {
		for _, p := range append(g.background, g.dev) {
			if p != nil {
				_ = p.stop(30 * time.Second)
			}
		}
		if !t.Failed() {
			return
		}
		if g.dev != nil {
			t.Logf("leasehold dev:\n%s", g.dev.out.String())
		}
		for _, p := range g.background {
			t.Logf("%s:\n%s", strings.Join(p.cmd.Args, " "), p.out.String())
		}
	})

	began := time.Now()
	for _, st := range steps {
		if m := makeRunStep.FindStringSubmatch(st.script); m != nil {
			g.makeRun(st, m[1])
			continue
		}
		var other *process
		var before int
		if st.elsewhere != nil {
			other = g.background[len(g.background)-1]
			before = len(other.out.String())
		}
		g.shell(st)
		if other != nil {
			testenv.Eventually(t, 60*time.Second, func() bool {
				return g.contains(other.out.String()[before:], st.elsewhere)
			}, "line %d: the other terminal never printed %q", st.line, st.elsewhere)
		}
	}
	for _, p := range g.background {
		_ = p.stop(30 * time.Second)
	}
	if err := g.dev.stop(60 * time.Second); err != nil {
		t.Fatalf("Ctrl-C on the dev mode: %v\n%s", err, g.dev.out.String())
	}
	g.background, g.dev = nil, nil
	t.Logf("%d steps of %s in %v", len(steps), filepath.Base(path), time.Since(began).Round(time.Second))
}
