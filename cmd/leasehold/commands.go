package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/leasehold/leasehold/internal/httpapi"
	"github.com/leasehold/leasehold/job"
)

// table writes aligned columns to w; flush it when done.
func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

func when(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format(time.DateTime)
}

// printJob writes a job as one field per line.
func printJob(w io.Writer, j job.Job) error {
	t := table(w)
	row := func(k, v string) { fmt.Fprintf(t, "%s\t%s\n", k, v) }
	row("id", j.ID)
	row("tenant", j.Tenant)
	row("queue", j.Queue)
	row("kind", j.Kind)
	state := string(j.State)
	if j.CancelRequested && j.State == job.StateRunning {
		state += " (cancel requested)"
	}
	row("state", state)
	row("attempt", fmt.Sprintf("%d of %d", j.Attempt, j.MaxAttempts))
	row("priority", strconv.Itoa(j.Priority))
	row("keys", strings.Join(j.ConcurrencyKeys, ", "))
	row("created", when(&j.CreatedAt))
	row("started", when(j.StartedAt))
	row("finished", when(j.FinishedAt))
	if w := j.WaitingFor; w != nil {
		row("waiting for", fmt.Sprintf("signal %q until %s", w.Name, when(&w.Until)))
	}
	if e := j.Execution; e != nil {
		row("execution", fmt.Sprintf("%s on %s, token %d, attempt %d, started %s", e.ID, e.Worker, e.FencingToken, e.Attempt, when(&e.StartedAt)))
	}
	if j.Error != nil {
		row("error", j.Error.Error())
	}
	if len(j.Result) > 0 && string(j.Result) != "null" {
		row("result", string(j.Result))
	}
	if len(j.Checkpoint) > 0 && string(j.Checkpoint) != "null" {
		row("checkpoint", string(j.Checkpoint))
	}
	if len(j.Metadata) > 0 && string(j.Metadata) != "null" {
		row("metadata", string(j.Metadata))
	}
	if h := j.Webhook; h != nil {
		delivery := "sent when the job ends"
		if h.State != "" {
			delivery = fmt.Sprintf("%s, %d attempts", h.State, h.Attempts)
		}
		row("webhook", h.URL+" ("+delivery+")")
	}
	return t.Flush()
}

// leasehold signal JOB_ID NAME
func runSignal(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("signal", stdout, stderr)
	data := c.fs.String("data", "", "the signal's data, JSON (default null)")
	dataFile := c.fs.String("data-file", "", "read the data from this file; - reads it from stdin")
	pos, err := c.parse(args, 2, "JOB_ID NAME")
	if err != nil {
		return err
	}
	body := map[string]any{"name": pos[1]}
	raw, err := readInput(*data, *dataFile)
	if err != nil {
		return err
	}
	if raw != nil {
		body["data"] = raw
	}
	var j job.Job
	if err := c.get(ctx, http.MethodPost, "/v1/jobs/"+escape(pos[0])+"/signal", body, &j); err != nil || c.json() {
		return err
	}
	return printJob(c.stdout, j)
}

// jobCommand runs a command on one job: method on /v1/jobs/ID + suffix,
// printing the job it answers with.
func jobCommand(ctx context.Context, name, method, suffix string, args []string, stdout, stderr io.Writer) error {
	c := newCommand(name, stdout, stderr)
	pos, err := c.parse(args, 1, "JOB_ID")
	if err != nil {
		return err
	}
	var j job.Job
	if err := c.get(ctx, method, "/v1/jobs/"+escape(pos[0])+suffix, nil, &j); err != nil || c.json() {
		return err
	}
	return printJob(c.stdout, j)
}

// leasehold submit KIND, or leasehold submit --batch FILE.jsonl
func runSubmit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("submit", stdout, stderr)
	batch := c.fs.String("batch", "", "instead of KIND: submit each line of this JSON Lines file (- reads stdin), a POST /v1/jobs body with an optional idempotency_key, 1000 a request")
	jf := newJobFlags(c.fs)
	idem := c.fs.String("idempotency-key", "", "Idempotency-Key: the same key and body return the first job")
	follow := c.fs.Bool("watch", false, "follow the job until it ends, as leasehold watch does")
	pos, err := c.parse(args, -1, "KIND")
	if err != nil {
		return err
	}
	if *batch != "" {
		return submitBatch(ctx, c, pos, *batch)
	}
	if len(pos) != 1 {
		return usagef("usage: %s [flags] KIND, or %s [--url --key -o] --batch FILE.jsonl", c.fs.Name(), c.fs.Name())
	}
	body, err := jf.submission(pos[0])
	if err != nil {
		return err
	}
	req, err := c.request(ctx, http.MethodPost, "/v1/jobs", body)
	if err != nil {
		return err
	}
	if *idem != "" {
		req.Header.Set("Idempotency-Key", *idem)
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return problemOf(resp.StatusCode, b)
	}
	var j job.Job
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	if *follow {
		fmt.Fprintf(stderr, "job %s submitted\n", j.ID)
		return watchJob(ctx, c, j.ID)
	}
	if c.json() {
		_, err = stdout.Write(b)
		return err
	}
	return printJob(stdout, j)
}

// submitBatch submits the jobs of file, one JSON object a line (blank
// lines skipped), through POST /v1/jobs/batch, batchOf them a request,
// and prints what became of each line. Every line is checked to be JSON
// before anything is sent. It fails (exit 1) when any line was refused,
// after printing every answer.
func submitBatch(ctx context.Context, c *command, pos []string, file string) error {
	var stray []string
	c.fs.Visit(func(f *flag.Flag) {
		if f.Name != "batch" && f.Name != "url" && f.Name != "key" && f.Name != "o" {
			stray = append(stray, "--"+f.Name)
		}
	})
	if len(pos) > 0 || len(stray) > 0 {
		return usagef("--batch takes every job from its file: no KIND, and no %s", strings.Join(append(pos, stray...), ", "))
	}
	lines, numbers, err := readJSONLines(file)
	if err != nil {
		return err
	}
	var entries []batchEntry
	for len(lines) > 0 {
		n := batchOf(lines)
		var answer struct {
			Jobs []batchEntry `json:"jobs"`
		}
		err := c.get(ctx, http.MethodPost, "/v1/jobs/batch", map[string][]json.RawMessage{"jobs": lines[:n]}, &answer)
		if err == nil && len(answer.Jobs) != n {
			err = fmt.Errorf("the API answered %d entries for %d jobs", len(answer.Jobs), n)
		}
		if err != nil {
			if len(entries) > 0 {
				err = fmt.Errorf("lines from %d on: %w (the lines before were submitted)", numbers[len(entries)], err)
			}
			return errors.Join(err, c.printBatch(entries, numbers))
		}
		entries, lines = append(entries, answer.Jobs...), lines[n:]
	}
	return c.printBatch(entries, numbers)
}

// batchOf is how many of lines the next request sends: at most
// job.MaxBatch, and no more than fit the API's default batch body
// (httpapi.DefaultMaxBatchBody), so that a file of large jobs is not
// refused 413 as a whole; a line alone is always sent.
func batchOf(lines []json.RawMessage) int {
	size := len(`{"jobs":[]}`)
	for n, l := range lines[:min(len(lines), job.MaxBatch)] {
		if size += len(l) + 1; n > 0 && size > httpapi.DefaultMaxBatchBody {
			return n
		}
	}
	return min(len(lines), job.MaxBatch)
}

// batchEntry is one job's answer in a batch.
type batchEntry struct {
	Status  int             `json:"status"`
	Job     *job.Job        `json:"job"`
	Problem json.RawMessage `json:"problem"`
}

// printBatch prints, in table form, each line's status and job id or
// problem (with -o json, c.get printed the API's answers), and returns an
// error when any was refused.
func (c *command) printBatch(entries []batchEntry, numbers []int) error {
	refused := 0
	t := table(c.stdout)
	if !c.json() {
		fmt.Fprintln(t, "LINE\tSTATUS\tJOB")
	}
	for i, e := range entries {
		what := ""
		if e.Job != nil {
			what = e.Job.ID
		} else {
			refused++
			what = strings.ReplaceAll(problemOf(e.Status, e.Problem).Error(), "\n", ";")
		}
		if !c.json() {
			fmt.Fprintf(t, "%d\t%d\t%s\n", numbers[i], e.Status, what)
		}
	}
	if err := t.Flush(); err != nil {
		return err
	}
	if refused > 0 {
		return fmt.Errorf("%d of %d jobs refused", refused, len(entries))
	}
	return nil
}

// readJSONLines reads the non-blank lines of file ("-": stdin), each of
// which must be JSON, with their line numbers.
func readJSONLines(file string) (lines []json.RawMessage, numbers []int, err error) {
	var r io.Reader = os.Stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, nil, err
		}
		defer f.Close()
		r = f
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 16<<20) // a line is one job, which the API takes up to its body limit
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if !json.Valid(line) {
			return nil, nil, usagef("%s line %d: not JSON", file, n)
		}
		lines, numbers = append(lines, json.RawMessage(slices.Clone(line))), append(numbers, n)
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", file, err)
	}
	if len(lines) == 0 {
		return nil, nil, usagef("%s: no jobs", file)
	}
	return lines, numbers, nil
}

// keyList is a repeated string flag.
// jobFlags are the flags that make a submission: a job's for submit, a
// schedule's job for schedules create.
type jobFlags struct {
	input, inputFile, queue, timeout, maxWait, delay, onBusy, metadata, webhook *string
	priority, attempts                                                          *int
	ckeys                                                                       keyList
}

func newJobFlags(fs *flag.FlagSet) *jobFlags {
	f := &jobFlags{
		input:     fs.String("input", "", "the job's input, JSON (default {})"),
		inputFile: fs.String("input-file", "", "read the input from this file; - reads it from stdin"),
		queue:     fs.String("queue", "", "queue (default: the API's default)"),
		priority:  fs.Int("priority", 0, "priority, -100 to 100"),
		attempts:  fs.Int("max-attempts", 0, "attempts before the job fails (default 3)"),
		timeout:   fs.String("timeout", "", "per execution, a Go duration (default 10m)"),
		maxWait:   fs.String("max-wait", "", "time allowed in the queue before the job expires"),
		delay:     fs.String("delay", "", "time before the job may first run"),
		onBusy:    fs.String("on-busy", "", "queue or reject, when a concurrency key is full"),
		metadata:  fs.String("metadata", "", "metadata, a JSON object"),
		webhook:   fs.String("webhook", "", "a URL to POST the job to when it ends (must start with a prefix of the API's LEASEHOLD_WEBHOOK_ALLOW)"),
	}
	fs.Var(&f.ckeys, "ckey", "a concurrency key (repeat for several)")
	return f
}

// submission returns the POST /v1/jobs body of a job of kind that the
// flags describe.
func (f *jobFlags) submission(kind string) (map[string]any, error) {
	body := map[string]any{"kind": kind}
	raw, err := readInput(*f.input, *f.inputFile)
	if err != nil {
		return nil, err
	}
	if raw != nil {
		body["input"] = raw
	}
	if *f.metadata != "" {
		if !json.Valid([]byte(*f.metadata)) {
			return nil, usagef("--metadata: not JSON")
		}
		body["metadata"] = json.RawMessage(*f.metadata)
	}
	for name, v := range map[string]string{"queue": *f.queue, "timeout": *f.timeout, "max_wait": *f.maxWait, "delay": *f.delay, "on_busy": *f.onBusy} {
		if v != "" {
			body[name] = v
		}
	}
	if *f.priority != 0 {
		body["priority"] = *f.priority
	}
	if *f.webhook != "" {
		body["webhook"] = map[string]string{"url": *f.webhook}
	}
	if *f.attempts != 0 {
		body["max_attempts"] = *f.attempts
	}
	if len(f.ckeys) > 0 {
		body["concurrency_keys"] = []string(f.ckeys)
	}
	return body, nil
}

type keyList []string

func (k *keyList) String() string     { return strings.Join(*k, ",") }
func (k *keyList) Set(v string) error { *k = append(*k, v); return nil }

// readInput returns the input given inline or in a file ("-": stdin), nil
// for none; it must be JSON.
func readInput(inline, file string) (json.RawMessage, error) {
	var b []byte
	switch {
	case inline != "" && file != "":
		return nil, usagef("give --input or --input-file, not both")
	case inline != "":
		b = []byte(inline)
	case file == "-":
		var err error
		if b, err = io.ReadAll(os.Stdin); err != nil {
			return nil, fmt.Errorf("read stdin: %w", err)
		}
	case file != "":
		var err error
		if b, err = os.ReadFile(file); err != nil {
			return nil, err
		}
	default:
		return nil, nil
	}
	if !json.Valid(b) {
		return nil, usagef("the input is not JSON")
	}
	return json.RawMessage(b), nil
}

// leasehold retry JOB_ID, or leasehold retry --all [filters]
func runRetry(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("retry", stdout, stderr)
	all := c.fs.Bool("all", false, "retry every ended job the filters select, instead of one job")
	state := c.fs.String("state", "", "with --all: failed (default), cancelled or expired")
	kind := c.fs.String("kind", "", "with --all: only jobs of this kind")
	queue := c.fs.String("queue", "", "with --all: only jobs of this queue")
	tenant := c.fs.String("tenant", "", "with --all, admin only: only this tenant's jobs")
	pos, err := c.parse(args, -1, "")
	if err != nil {
		return err
	}
	switch {
	case !*all && len(pos) == 1:
		var j job.Job
		if err := c.get(ctx, http.MethodPost, "/v1/jobs/"+escape(pos[0])+"/retry", nil, &j); err != nil || c.json() {
			return err
		}
		return printJob(stdout, j)
	case !*all || len(pos) > 0:
		return usagef("usage: leasehold retry [flags] JOB_ID, or leasehold retry --all [--state S] [--kind K] [--queue Q] [--tenant T]")
	}
	filter := map[string]string{}
	for name, v := range map[string]string{"state": *state, "kind": *kind, "queue": *queue, "tenant": *tenant} {
		if v != "" {
			filter[name] = v
		}
	}
	// One call moves a bounded number of jobs and says where to go on. A
	// call the tenant's rate or cap stopped asks to wait (Retry-After):
	// the command waits and goes on, until a call after a wait moves
	// nothing either.
	total := struct {
		Moved  int            `json:"moved"`
		Queues map[string]int `json:"queues"`
	}{Queues: map[string]int{}}
	stalled := false
	for {
		b, wait, err := c.exchange(ctx, http.MethodPost, "/v1/jobs/retry", filter)
		var page struct {
			Moved      int            `json:"moved"`
			Queues     map[string]int `json:"queues"`
			NextCursor *string        `json:"next_cursor"`
		}
		var refused *apiError
		if errors.As(err, &refused) && refused.Status == http.StatusTooManyRequests && wait > 0 && !stalled {
			err = nil // nothing moved: wait, then ask again from the same cursor
		} else if err == nil {
			err = json.Unmarshal(b, &page)
		}
		if err != nil {
			if total.Moved > 0 {
				fmt.Fprintf(stderr, "moved %d jobs back to queued before this error; run the command again to go on\n", total.Moved)
			}
			return err
		}
		total.Moved += page.Moved
		for q, n := range page.Queues {
			total.Queues[q] += n
		}
		if refused == nil && page.NextCursor == nil {
			break
		}
		if page.NextCursor != nil {
			filter["cursor"] = *page.NextCursor
		}
		stalled = page.Moved == 0 && wait > 0
		if wait > 0 {
			fmt.Fprintf(stderr, "moved %d jobs; the tenant's rate or cap asks to wait %v before the next (Ctrl-C stops)\n", total.Moved, wait)
			select {
			case <-ctx.Done():
				return fmt.Errorf("moved %d jobs back to queued, then stopped: %w", total.Moved, ctx.Err())
			case <-time.After(wait):
			}
		}
	}
	if c.json() {
		return json.NewEncoder(stdout).Encode(total)
	}
	_, err = fmt.Fprintf(stdout, "moved %d jobs back to queued\n", total.Moved)
	return err
}

// deleteCommand runs a DELETE of path + the one argument, and says so:
// "<verb> <arg>", or {"<verb>": "<arg>"} with -o json.
func deleteCommand(ctx context.Context, name, path, verb string, args []string, stdout, stderr io.Writer) error {
	c := newCommand(name, stdout, stderr)
	pos, err := c.parse(args, 1, "ID")
	if err != nil {
		return err
	}
	if _, err := c.call(ctx, http.MethodDelete, path+escape(pos[0]), nil); err != nil {
		return err
	}
	if c.json() {
		_, err = fmt.Fprintf(stdout, "{%q:%q}\n", verb, pos[0])
	} else {
		_, err = fmt.Fprintf(stdout, "%s %s\n", verb, pos[0])
	}
	return err
}

// leasehold ls
func runLs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("ls", stdout, stderr)
	filters := map[string]*string{
		"state":  c.fs.String("state", "", "only jobs in this state"),
		"kind":   c.fs.String("kind", "", "only jobs of this kind"),
		"queue":  c.fs.String("queue", "", "only jobs of this queue"),
		"tenant": c.fs.String("tenant", "", "admin only: only this tenant's jobs"),
		"cursor": c.fs.String("cursor", "", "the next page, from a previous page's next_cursor"),
	}
	limit := c.fs.Int("limit", 0, "jobs per page, 1 to 500 (default 50)")
	if _, err := c.parse(args, 0, ""); err != nil {
		return err
	}
	q := url.Values{}
	for name, v := range filters {
		if *v != "" {
			q.Set(name, *v)
		}
	}
	if *limit != 0 {
		q.Set("limit", strconv.Itoa(*limit))
	}
	var page struct {
		Jobs       []job.Job `json:"jobs"`
		NextCursor *string   `json:"next_cursor"`
	}
	path := "/v1/jobs"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	if err := c.get(ctx, http.MethodGet, path, nil, &page); err != nil || c.json() {
		return err
	}
	t := table(stdout)
	fmt.Fprintln(t, "ID\tSTATE\tKIND\tQUEUE\tTENANT\tATTEMPT\tCREATED")
	for _, j := range page.Jobs {
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\n", j.ID, j.State, j.Kind, j.Queue, j.Tenant, j.Attempt, j.MaxAttempts, when(&j.CreatedAt))
	}
	if err := t.Flush(); err != nil {
		return err
	}
	if page.NextCursor != nil {
		fmt.Fprintf(stderr, "more: leasehold ls --cursor %s\n", *page.NextCursor)
	}
	return nil
}

// leasehold queues [pause|resume NAME]
func runQueues(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && (args[0] == "pause" || args[0] == "resume") {
		c := newCommand("queues "+args[0], stdout, stderr)
		pos, err := c.parse(args[1:], 1, "QUEUE")
		if err != nil {
			return err
		}
		var q job.QueueStats
		if err := c.get(ctx, http.MethodPost, "/v1/queues/"+escape(pos[0])+"/"+args[0], nil, &q); err != nil || c.json() {
			return adminOnly(err)
		}
		return printQueues(stdout, []job.QueueStats{q})
	}
	c := newCommand("queues", stdout, stderr)
	if _, err := c.parse(args, 0, "   (or: queues pause|resume QUEUE)"); err != nil {
		return err
	}
	var list struct {
		Queues []job.QueueStats `json:"queues"`
	}
	if err := c.get(ctx, http.MethodGet, "/v1/queues", nil, &list); err != nil || c.json() {
		return err
	}
	return printQueues(stdout, list.Queues)
}

func printQueues(w io.Writer, queues []job.QueueStats) error {
	t := table(w)
	fmt.Fprintln(t, "QUEUE\tQUEUED\tRUNNING\tRETRYING\tWAITING\tPAUSED")
	for _, q := range queues {
		fmt.Fprintf(t, "%s\t%d\t%d\t%d\t%d\t%t\n", q.Name, q.Queued, q.Running, q.Retrying, q.Waiting, q.Paused)
	}
	return t.Flush()
}

// leasehold limits [set KEY [N] [--rpm R] [--tpm T] [--adaptive] [--per-tenant P] | rm KEY]
func runLimits(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	print := func(limits []job.Limit) error {
		t := table(stdout)
		fmt.Fprintln(t, "KEY\tLIMIT\tEFFECTIVE\tIN_USE\tRPM\tREQ/MIN\tTPM\tTOK/MIN\tTHROTTLED_UNTIL\tWAITING")
		for _, l := range limits {
			until := "-"
			if !l.ThrottledUntil.IsZero() {
				until = l.ThrottledUntil.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(t, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d\n", l.Key, optional(l.Limit), optional(l.EffectiveLimit),
				l.InUse, optional(l.RPM), optional(l.RequestsLastMinute), optional(l.TPM), optional(l.TokensLastMinute), until, l.Waiting)
		}
		return t.Flush()
	}
	switch {
	case len(args) > 0 && args[0] == "set":
		c := newCommand("limits set", stdout, stderr)
		budgets := map[string]*int64{
			"rpm":        c.fs.Int64("rpm", 0, "executions that may start per rolling minute, fleet-wide (0 removes it)"),
			"tpm":        c.fs.Int64("tpm", 0, "tokens per rolling minute, fleet-wide (0 removes it)"),
			"per_tenant": c.fs.Int64("per-tenant", 0, "the most slots one tenant may hold, and its share of rpm and tpm (0 removes it)"),
		}
		adaptive := c.fs.Bool("adaptive", false, "the key's concurrency follows the upstream's pushback, up to the limit (--adaptive=false turns it off)")
		pos, err := c.parse(args[1:], -1, "KEY [LIMIT]")
		if err != nil {
			return err
		}
		if len(pos) < 1 || len(pos) > 2 {
			return usagef("usage: limits set [flags] KEY [LIMIT]")
		}
		// A merge patch: a flag given changes the key, one left out keeps
		// what the key has.
		body := map[string]any{}
		if len(pos) == 2 {
			n, err := strconv.ParseInt(pos[1], 10, 64)
			if err != nil {
				return usagef("limit %q: not a whole number", pos[1])
			}
			body["limit"] = n
		}
		c.fs.Visit(func(f *flag.Flag) {
			name := strings.ReplaceAll(f.Name, "-", "_")
			switch n, budget := budgets[name]; {
			case name == "adaptive":
				body[name] = *adaptive
			case budget && *n == 0:
				body[name] = nil
			case budget:
				body[name] = *n
			}
		})
		var l job.Limit
		if err := c.get(ctx, http.MethodPatch, "/v1/limits/"+escape(pos[0]), body, &l); err != nil || c.json() {
			return adminOnly(err)
		}
		return print([]job.Limit{l})
	case len(args) > 0 && args[0] == "rm":
		return adminOnly(deleteCommand(ctx, "limits rm", "/v1/limits/", "removed", args[1:], stdout, stderr))
	}
	c := newCommand("limits", stdout, stderr)
	if _, err := c.parse(args, 0, "   (or: limits set KEY [LIMIT] [--rpm R] [--tpm T] [--adaptive] [--per-tenant P], limits rm KEY)"); err != nil {
		return err
	}
	// Every page, as one listing: a page is at most 500 keys.
	var items []json.RawMessage
	q := url.Values{"limit": {"500"}}
	for {
		b, err := c.call(ctx, http.MethodGet, "/v1/limits?"+q.Encode(), nil)
		if err != nil {
			return err
		}
		var page struct {
			Limits     []json.RawMessage `json:"limits"`
			NextCursor *string           `json:"next_cursor"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			return err
		}
		items = append(items, page.Limits...)
		if page.NextCursor == nil {
			break
		}
		q.Set("cursor", *page.NextCursor)
	}
	if c.json() {
		if items == nil {
			items = []json.RawMessage{}
		}
		return json.NewEncoder(stdout).Encode(map[string]any{"limits": items, "next_cursor": nil})
	}
	limits := make([]job.Limit, len(items))
	for i, item := range items {
		if err := json.Unmarshal(item, &limits[i]); err != nil {
			return err
		}
	}
	return print(limits)
}

// optional is a number a key may not use, as a table shows it: "-" for none.
func optional(o job.Optional) string {
	if !o.Set {
		return "-"
	}
	return strconv.FormatInt(o.Value, 10)
}

// leasehold usage [--from DAY] [--to DAY] [--tenant T]
func runUsage(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("usage", stdout, stderr)
	today := time.Now().UTC().Format(time.DateOnly)
	from := c.fs.String("from", time.Now().UTC().AddDate(0, 0, -6).Format(time.DateOnly), "first day, UTC, YYYY-MM-DD")
	to := c.fs.String("to", today, "last day, UTC, YYYY-MM-DD")
	tenant := c.fs.String("tenant", "", "admin only: this tenant's usage")
	if _, err := c.parse(args, 0, ""); err != nil {
		return err
	}
	q := url.Values{"from": {*from}, "to": {*to}}
	if *tenant != "" {
		q.Set("tenant", *tenant)
	}
	var u struct {
		Days []struct {
			Date   string           `json:"date"`
			Counts map[string]int64 `json:"counts"`
		} `json:"days"`
	}
	if err := c.get(ctx, http.MethodGet, "/v1/usage?"+q.Encode(), nil, &u); err != nil || c.json() {
		return err
	}
	t := table(stdout)
	fmt.Fprintln(t, "DATE\tCOUNTER\tCOUNT")
	for _, d := range u.Days {
		for _, name := range slices.Sorted(maps.Keys(d.Counts)) {
			fmt.Fprintf(t, "%s\t%s\t%d\n", d.Date, name, d.Counts[name])
		}
	}
	return t.Flush()
}
