// Command leasehold is the developer's entry point. `leasehold dev` starts
// the whole system in one process on defaults: the API, a worker, an
// embedded NATS server and Redis — a redis-server child process with its
// data in .dev/ when redis-server is installed, otherwise an in-process
// stand-in that keeps nothing. The production binaries are cmd/api and
// cmd/worker.
package main

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/oklog/run"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/cli"
	"github.com/leasehold/leasehold/internal/fakellm"
	"github.com/leasehold/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/internal/redisproc"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/telemetry"
	"github.com/leasehold/leasehold/kinds"
	"github.com/leasehold/leasehold/kinds/remote"
	usagecount "github.com/leasehold/leasehold/ratelimit/usage" // "usage" is the command line help
	"github.com/leasehold/leasehold/webhook"
)

const usage = `usage: leasehold <command> [flags] [args]

  dev                          start API, worker, NATS and Redis on defaults (make run)
  submit KIND                  submit a job (--input JSON, --input-file FILE or - for stdin; --webhook URL; --watch to follow it)
  submit --batch FILE.jsonl    submit one job per line of FILE (- for stdin), 1000 a request
  get JOB_ID                   show a job
  watch JOB_ID                 follow a job live: states, progress, output text on stdout
  cancel JOB_ID                cancel a job
  signal JOB_ID NAME           send a job a signal (--data JSON, --data-file FILE or -): a job waiting for NAME resumes
  retry JOB_ID                 run an ended job again (retry --all [--state --kind --queue --tenant]: in bulk)
  rm JOB_ID                    delete an ended job
  ls                           list jobs (--state, --kind, --queue, --tenant, --limit, --cursor)
  queues                       queue counts (queues pause QUEUE, queues resume QUEUE: admin)
  workers                      live workers: queues, kinds, running (a tenant sees those running its jobs)
  limits                       concurrency limits (limits set KEY N, limits rm KEY: admin)
  usage                        usage per day (--from, --to, --tenant)
  schedules                    schedules: ls (--limit, --cursor), create and update NAME CRON KIND (--timezone, --overlap, --input), get, rm, pause, resume, trigger NAME

Every command but dev takes --url (default $LEASEHOLD_URL, else http://127.0.0.1:8080),
--key (default $LEASEHOLD_KEY) and -o table|json; leasehold <command> -h lists its flags.

Exit codes: 0 done (a watched job succeeded), 1 error, 2 bad command line,
3 a watched job failed, 4 it was cancelled, 5 it expired.`

func main() {
	os.Exit(exitCode(runCommand(context.Background(), os.Args[1:], os.Stdout, os.Stderr)))
}

// exitCode turns runCommand's error into the exit code, printing it.
func exitCode(err error) int {
	var ended *endedError
	var bad *usageError
	switch {
	case errors.As(err, &ended):
		return ended.code() // watch has said how it ended
	case errors.As(err, &bad):
		fmt.Fprintf(cli.Text(os.Stderr), "leasehold: %v\n", err)
		return 2
	}
	return cli.Code("leasehold", err)
}

func runCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return &usageError{msg: usage}
	}
	name, args := args[0], args[1:]
	if name == "dev" { // dev handles its signals in its run group
		return runDev(ctx, args, stdout, stderr)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// What the commands print is mostly tenants' text: no control
	// character of it reaches the operator's terminal.
	stdout, stderr = cli.Text(stdout), cli.Text(stderr)
	switch name {
	case "submit":
		return runSubmit(ctx, args, stdout, stderr)
	case "get":
		return jobCommand(ctx, "get", http.MethodGet, "", args, stdout, stderr)
	case "watch":
		return runWatch(ctx, args, stdout, stderr)
	case "cancel":
		return jobCommand(ctx, "cancel", http.MethodPost, "/cancel", args, stdout, stderr)
	case "signal":
		return runSignal(ctx, args, stdout, stderr)
	case "retry":
		return runRetry(ctx, args, stdout, stderr)
	case "rm":
		return deleteCommand(ctx, "rm", "/v1/jobs/", "deleted", args, stdout, stderr)
	case "ls":
		return runLs(ctx, args, stdout, stderr)
	case "queues":
		return runQueues(ctx, args, stdout, stderr)
	case "workers":
		return runWorkers(ctx, args, stdout, stderr)
	case "limits":
		return runLimits(ctx, args, stdout, stderr)
	case "usage":
		return runUsage(ctx, args, stdout, stderr)
	case "schedules":
		return runSchedules(ctx, args, stdout, stderr)
	case "-h", "--help", "help":
		_, err := fmt.Fprintln(stdout, usage)
		return err
	}
	return unknownCommand(name)
}

// commands are the CLI's commands, for unknownCommand's suggestion.
var commands = []string{"dev", "submit", "get", "watch", "cancel", "signal", "retry", "rm", "ls", "queues", "workers", "limits", "usage", "schedules"}

// unknownCommand names a command the CLI does not have, with the known one
// nearest to it (a prefix of it, or a couple of letters away) when there is
// one.
func unknownCommand(name string) error {
	best, bestDist := "", 3 // farther than 2 edits is no suggestion
	for _, c := range commands {
		if d := editDistance(name, c); d < bestDist || len(name) >= 2 && strings.HasPrefix(c, name) {
			best, bestDist = c, min(d, bestDist)
		}
	}
	msg := fmt.Sprintf("unknown command %q", name)
	if best != "" {
		msg += fmt.Sprintf("; did you mean %q?", best)
	}
	return usagef("%s (leasehold -h lists the commands)", msg)
}

// editDistance is the Levenshtein distance between a and b, in bytes: the
// fewest insertions, deletions and substitutions that make b of a.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlags("leasehold dev", stderr)
	addr := fs.String("addr", "LEASEHOLD_ADDR", "127.0.0.1:8080", "API listen address")
	dataDir := fs.String("data", "LEASEHOLD_DEV_DATA", ".dev", "directory for Redis's data (AOF)")
	llmURL := fs.URL("llm-base-url", "LEASEHOLD_LLM_BASE_URL", "", "OpenAI-compatible API for llm.chat (default: a fake one in this process)")
	llmKey := fs.Secret("llm-api-key", "LEASEHOLD_LLM_API_KEY", "API key for the llm.chat upstream")
	notifyFlag := fs.String("notify-allow", "LEASEHOLD_NOTIFY_ALLOW", "", "comma-separated URL prefixes a sleep job's notify_url may start with, besides loopback, which the dev mode allows")
	metricsAddr := fs.String("metrics-addr", "LEASEHOLD_METRICS_ADDR", "127.0.0.1:9091", "listen address of /metrics, /healthz and /readyz, apart from the API's port")
	handlers := fs.Handlers()
	webhookFlags := fs.Webhooks()
	memory := fs.FlagSet.Bool("memory", false, "use the in-process Redis stand-in even when redis-server is installed")
	apiKeys := fs.Secret("api-keys", "LEASEHOLD_API_KEYS", "comma-separated tenant:key pairs to use instead of the keys kept in the data directory's credentials file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	release, err := lockData(*dataDir, "http://"+*addr)
	if err != nil {
		return err
	}
	defer release()
	notifyAllow, err := kinds.ParseNotifyAllow(*notifyFlag)
	if err != nil {
		return fmt.Errorf("LEASEHOLD_NOTIFY_ALLOW (--notify-allow): %w", err)
	}
	remotes, err := remote.ParseHandlers(*handlers)
	if err != nil {
		return err
	}
	notifyAllow.Loopback = true
	webhooks, err := webhookFlags.Policy(true)
	if err != nil {
		return err
	}
	log := cli.Logger(stderr)
	stopTracing, err := telemetry.Setup(ctx, "leasehold-dev", log)
	if err != nil {
		return err
	}
	defer stopTracing()

	rdb, redisURL, stopRedis, durable, err := startRedis(ctx, *dataDir, *memory, log)
	if err != nil {
		return err
	}
	defer stopRedis()
	defer rdb.Close()

	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	ns.Start()
	defer ns.WaitForShutdown()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		return errors.New("nats: embedded server did not start")
	}
	nc, err := cli.NATS(ns.ClientURL(), "leasehold-dev", log)
	if err != nil {
		return err
	}
	defer nc.Close()

	keys, access, err := devKeys(*dataDir, *apiKeys, webhooks, log)
	if err != nil {
		return err
	}
	meters, metrics, err := cli.Metrics()
	if err != nil {
		return err
	}
	defer meters.Shutdown(context.WithoutCancel(ctx))
	counters, err := usagecount.New(store.New(rdb, store.Config{}), usagecount.Config{})
	if err != nil {
		return err
	}
	var g run.Group
	llm := kinds.LLMConfig{BaseURL: *llmURL, APIKey: *llmKey}
	if llm.BaseURL == "" {
		// A fake upstream streams numbered tokens, so llm.chat can be tried
		// without an account.
		fake, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		llm.BaseURL = "http://" + fake.Addr().String() + "/v1"
		g.Add(cli.Serve(ctx, fake, fakellm.New(fakellm.Config{Tokens: 40, Delay: 100 * time.Millisecond}), log))
	}
	// The worker is the one a Go program embeds, on the worker command's
	// defaults; its metrics join the API's on its /metrics: one registry.
	worker, err := leasehold.NewClient(rdb, leasehold.Config{
		Worker:   execution.Config{NATS: nc, Logger: log, Usage: counters, MeterProvider: meters, ShutdownGrace: devGrace},
		Handlers: remotes,
		Sleep:    kinds.SleepConfig{Allow: notifyAllow, Logger: log},
		LLM:      llm,
	})
	if err != nil {
		return err
	}
	// Signals are caught from here on: a Ctrl-C right after the banner
	// stops cleanly too.
	stopped := make(chan struct{})
	defer close(stopped)
	onSignal, onStop := stopOnSignal(ctx, worker, stderr, stopped)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	opsLn, err := net.Listen("tcp", *metricsAddr)
	if err != nil {
		ln.Close()
		return err
	}
	access.base, access.redis, access.nats = "http://"+ln.Addr().String(), redisURL, ns.ClientURL()
	banner(stdout, access, *dataDir, durable, *llmURL == "", remotes)
	log.Info("metrics listening", "metrics_addr", opsLn.Addr().String())

	if err := cli.API(ctx, &g, ln, opsLn, httpapi.Config{
		Redis: rdb, NATS: nc, Keys: keys, Logger: log, MeterProvider: meters, Metrics: metrics,
		Usage: counters, NotifyAllow: notifyAllow, Webhooks: webhooks,
		LLM: httpapi.LLMConfig{BaseURL: llm.BaseURL, APIKey: llm.APIKey},
	}, webhookFlags); err != nil {
		return err
	}
	workCtx, stopWork := context.WithCancel(ctx)
	g.Add(func() error { return worker.Run(workCtx) }, func(error) { stopWork() })
	g.Add(onSignal, onStop)
	return g.Run()
}

// startRedis starts a redis-server child process with AOF in dir, or, when
// there is none (or memory is set), an in-process stand-in whose clock runs
// in real time. url is where other processes reach it; durable says which
// it is.
func startRedis(ctx context.Context, dir string, memory bool, log *slog.Logger) (rdb redis.UniversalClient, url string, stop func(), durable bool, err error) {
	if !memory && redisproc.Installed() {
		dir = filepath.Join(dir, "redis")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, "", nil, false, err
		}
		port, err := redisproc.FreePort()
		if err != nil {
			return nil, "", nil, false, err
		}
		srv, err := redisproc.Start(dir, port)
		if err != nil {
			return nil, "", nil, false, err
		}
		url := "redis://" + srv.Addr() + "/0"
		rdb, err := cli.Redis(ctx, cli.RedisConfig{URL: url}, log)
		if err != nil {
			srv.Stop()
			return nil, "", nil, false, err
		}
		log.Info("redis-server started", "addr", srv.Addr(), "data", dir)
		return rdb, url, srv.Stop, true, nil
	}
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true) // keys expire in real time, as leases must
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, "", nil, false, fmt.Errorf("in-process redis: %w", err)
	}
	if memory {
		log.Warn("using the in-process Redis stand-in (--memory). NOTHING IS DURABLE: every job is lost when this process stops")
	} else {
		log.Warn("NO redis-server FOUND: using an in-process Redis stand-in. NOTHING IS DURABLE: every job is lost when this process stops. " + redisproc.InstallHint)
	}
	return redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true}), "redis://" + m.Addr() + "/0", m.Close, false, nil
}

// devAccess is where the dev mode is reached and with which keys.
type devAccess struct {
	base, redis, nats     string // the API's, Redis's and NATS's URLs
	tenant, key, adminKey string // the banner's tenant and its key; the admin's key ("" for none)
}

// devKeys returns the API keys of the dev mode and sets the webhook secret
// of the banner's tenant in webhooks, unless the webhook flags gave it one.
// Both come from the data directory's credentials file, where new ones are
// kept for the next start; apiKeys, when set, is used instead of the
// file's keys and leaves them as they are.
func devKeys(dir, apiKeys string, webhooks webhook.Policy, log *slog.Logger) (httpapi.Keys, devAccess, error) {
	stored, err := loadCredentials(dir)
	if err != nil {
		return httpapi.Keys{}, devAccess{}, err
	}
	before := stored
	if stored.apiKeys == "" {
		stored.apiKeys = newAPIKeys()
	}
	keys, err := httpapi.ParseKeys(cmp.Or(apiKeys, stored.apiKeys))
	if err != nil {
		return httpapi.Keys{}, devAccess{}, fmt.Errorf("LEASEHOLD_API_KEYS (--api-keys, or %s): %w", filepath.Join(dir, credentialsFile), err)
	}
	var a devAccess
	a.tenant, a.key, a.adminKey = bannerKeys(cmp.Or(apiKeys, stored.apiKeys))
	if len(webhooks.Secrets[a.tenant]) == 0 {
		// The tenant's webhooks are signed with a secret of its own,
		// logged so a receiver can verify them.
		secret, err := stored.webhookSecret(a.tenant)
		if err != nil {
			return httpapi.Keys{}, devAccess{}, err
		}
		webhooks.Secrets[a.tenant] = [][]byte{secret}
		log.Info("webhook secret of the tenant "+a.tenant, "secret", "whsec_"+base64.StdEncoding.EncodeToString(secret))
	}
	if stored != before {
		if err := stored.save(dir); err != nil {
			return httpapi.Keys{}, devAccess{}, fmt.Errorf("keep the dev credentials: %w", err)
		}
	}
	return keys, a, nil
}

// devGrace is how long the dev mode's worker lets running jobs finish at
// a stop, before it hands them back to their queue.
const devGrace = 30 * time.Second

// stopOnSignal is the run.Group actor that stops the dev mode at the first
// SIGINT or SIGTERM, saying which running jobs it waits for; a second one
// has the worker hand them back at once. It listens for the second until
// stopped is closed.
func stopOnSignal(ctx context.Context, worker *leasehold.Client, w io.Writer, stopped <-chan struct{}) (execute func() error, interrupt func(error)) {
	ctx, stop := context.WithCancel(ctx)
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	execute = func() error {
		select {
		case <-ctx.Done():
			signal.Stop(signals)
			return ctx.Err()
		case sig := <-signals:
			if n := worker.Running(); n > 0 {
				fmt.Fprintf(w, "\nwaiting up to %v for %s; Ctrl-C again hands them back now\n", devGrace, plural(n, "running job"))
			}
			go func() {
				defer signal.Stop(signals)
				select {
				case <-signals:
					fmt.Fprintln(w, "handing the running jobs back to their queue")
					worker.HandBack()
				case <-stopped:
				}
			}()
			return run.SignalError{Signal: sig}
		}
	}
	return execute, func(error) { stop() }
}

// plural is "1 job", "2 jobs".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// banner prints what a developer needs to start: the addresses, the keys,
// the console, the kinds served, and commands to copy, with curl and with
// the CLI.
func banner(w io.Writer, a devAccess, dataDir string, durable, fakeLLM bool, remotes map[string]string) {
	store := "redis-server, data in " + dataDir
	if !durable {
		store = "in-process stand-in: NOTHING IS DURABLE"
	}
	llm := "LEASEHOLD_LLM_BASE_URL"
	if fakeLLM {
		llm = "a fake upstream in this process (set LEASEHOLD_LLM_BASE_URL for a real one; model fake-capacity-N refuses above N calls at once)"
	}
	served := []string{"echo", "sleep", "llm.chat"}
	for _, kind := range slices.Sorted(maps.Keys(remotes)) {
		if !slices.Contains(served, kind) {
			served = append(served, kind)
		}
		served[slices.Index(served, kind)] += " (remote)"
	}
	admin := a.adminKey
	if admin == "" {
		admin = "none (no tenant admin in --api-keys)"
	}
	another := "LEASEHOLD_REDIS_URL=" + a.redis + " LEASEHOLD_NATS_URL=" + a.nats
	if !durable {
		// The stand-in has no CONFIG for another process to check that it
		// evicts nothing, which it never does.
		another = "LEASEHOLD_REDIS_ASSUME_NOEVICTION=1 " + another
	}
	base, auth := a.base, "Authorization: Bearer "+a.key
	fmt.Fprintf(w, `
Leasehold is running.
  API      %s   (tenant %q, key %s)
  Admin    key %s   (pauses queues, sets limits, sees every tenant)
  Console  %s/ui/   (log in with a key)
  Redis    %s   (%s)
  NATS     %s
  Worker   serving queue "default", kinds: %s
  LLM      %s

Submit a job that sleeps 20s, ticking every second:
  curl -s -X POST %s/v1/jobs -H '%s' -H 'Content-Type: application/json' \
    -d '{"kind":"sleep","input":{"duration":"20s","tick":"1s"}}'

Follow its events (put the id from the answer in ID):
  curl -N %s/v1/jobs/$ID/events -H '%s'

Cancel it:
  curl -s -X POST %s/v1/jobs/$ID/cancel -H '%s'

Or stream a chat completion the same way:
  curl -s -X POST %s/v1/jobs -H '%s' -H 'Content-Type: application/json' \
    -d '{"kind":"llm.chat","input":{"model":"fake","messages":[{"role":"user","content":"hi"}]}}'

With the CLI (go run ./cmd/leasehold, or go install ./cmd/leasehold):
  export LEASEHOLD_URL=%s LEASEHOLD_KEY=%s
  leasehold submit sleep --input '{"duration":"20s","tick":"1s"}' --watch
  leasehold submit llm.chat --input '{"model":"fake","messages":[{"role":"user","content":"hi"}]}' --watch
  leasehold ls --state failed
  leasehold retry $ID      leasehold cancel $ID      leasehold rm $ID
  LEASEHOLD_KEY=%s leasehold queues pause default

Another worker beside this one (the handler examples run theirs so):
  %s go run ./cmd/worker

The keys and the webhook secret are kept in %s for the next start.
Ctrl-C stops everything.
`, base, a.tenant, a.key, admin, base, a.redis, store, a.nats, strings.Join(served, ", "), llm,
		base, auth, base, auth, base, auth, base, auth, base, a.key, a.adminKey, another,
		filepath.Join(dataDir, credentialsFile))
}
