package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/redisproc"
)

// startOn starts one more process of binary name, with env on top of the
// system's (a later value wins).
func (s *system) startOn(name string, env ...string) *exec.Cmd {
	s.t.Helper()
	saved := s.env
	s.env = append(slices.Clone(s.env), env...)
	defer func() { s.env = saved }()
	return s.start(name)
}

type firedJob struct {
	ID        string    `json:"id"`
	Schedule  *string   `json:"schedule"`
	CreatedAt time.Time `json:"created_at"`
	Metadata  struct {
		ScheduledFor time.Time `json:"scheduled_for"`
	} `json:"metadata"`
}

// fired lists the jobs the schedule name fired, oldest first.
func (s *system) fired(name string) []firedJob {
	s.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.base+"/v1/jobs?limit=500", nil)
	req.Header.Set("Authorization", "Bearer "+s.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var page struct {
		Jobs       []firedJob `json:"jobs"`
		NextCursor *string    `json:"next_cursor"`
	}
	if err := json.Unmarshal(b, &page); err != nil || page.NextCursor != nil {
		s.t.Fatalf("list: %v, %s", err, b)
	}
	var out []firedJob
	for _, j := range page.Jobs {
		if j.Schedule != nil && *j.Schedule == name {
			out = append(out, j)
		}
	}
	slices.Reverse(out)
	return out
}

// An @every 1s schedule over two API and two worker processes, all of
// which fire schedules, for 20 s, while one worker is killed -9 and the
// other is stopped (SIGSTOP) for 4 s and continued: exactly one job per
// due time, none missing, each created at most 1 s after its due time.
func TestScheduleFiresOncePerSecondAcrossProcessesAndFaults(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	port, err := redisproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s.startOn("api", "LEASEHOLD_ADDR=127.0.0.1:"+strconv.Itoa(port))
	a := s.start("worker")
	b := s.start("worker")

	if code, _ := s.do(http.MethodPost, "/v1/schedules", `{"name": "tick", "cron": "@every 1s", "job": {"kind": "echo"}}`); code != http.StatusCreated {
		t.Fatalf("create: %d", code)
	}
	start := time.Now()
	at := func(d time.Duration) { time.Sleep(time.Until(start.Add(d))) }
	at(5 * time.Second)
	if err := a.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	at(9 * time.Second)
	if err := b.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	at(13 * time.Second)
	if err := b.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	at(20 * time.Second)
	if code, _ := s.do(http.MethodDelete, "/v1/schedules/tick", ""); code != http.StatusNoContent {
		t.Fatalf("delete: %d", code)
	}
	time.Sleep(2 * time.Second) // a fire already in hand lands; none after it

	jobs := s.fired("tick")
	if len(jobs) < 17 {
		t.Fatalf("%d jobs in 20 s of @every 1s", len(jobs))
	}
	var lates []string
	for i, j := range jobs {
		due := j.Metadata.ScheduledFor
		if i > 0 {
			if prev := jobs[i-1].Metadata.ScheduledFor; !due.Equal(prev.Add(time.Second)) {
				t.Errorf("job %d is for %s, after one for %s: want exactly one per second", i, due, prev)
			}
		}
		late := j.CreatedAt.Sub(due)
		lates = append(lates, late.String())
		if late < 0 || late > time.Second {
			t.Errorf("job %d for %s created %s after its due time", i, due, late)
		}
	}
	t.Logf("%d jobs; lateness: %s", len(jobs), strings.Join(lates, " "))
}
