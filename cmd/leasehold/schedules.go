package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/leasehold/leasehold/job"
	"github.com/leasehold/leasehold/schedule"
)

const schedulesUsage = "usage: leasehold schedules ls | create NAME CRON KIND | update NAME CRON KIND | get NAME | rm NAME | pause NAME | resume NAME | trigger NAME"

// leasehold schedules ls|create|update|get|rm|pause|resume|trigger
func runSchedules(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("%s", schedulesUsage)
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "ls":
		c := newCommand("schedules ls", stdout, stderr)
		cursor := c.fs.String("cursor", "", "the next page, from a previous page's next_cursor")
		limit := c.fs.Int("limit", 0, "schedules per page, 1 to 500 (default 50)")
		if _, err := c.parse(args, 0, ""); err != nil {
			return err
		}
		q := url.Values{}
		if *cursor != "" {
			q.Set("cursor", *cursor)
		}
		if *limit != 0 {
			q.Set("limit", strconv.Itoa(*limit))
		}
		path := "/v1/schedules"
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
		var page struct {
			Schedules  []schedule.Schedule `json:"schedules"`
			NextCursor *string             `json:"next_cursor"`
		}
		if err := c.get(ctx, http.MethodGet, path, nil, &page); err != nil || c.json() {
			return err
		}
		if err := printSchedules(stdout, page.Schedules); err != nil {
			return err
		}
		if page.NextCursor != nil {
			fmt.Fprintf(stderr, "more: leasehold schedules ls --cursor %s\n", *page.NextCursor)
		}
		return nil
	case "create", "update":
		return saveSchedule(ctx, sub, args, stdout, stderr)
	case "rm":
		return deleteCommand(ctx, "schedules rm", "/v1/schedules/", "deleted", args, stdout, stderr)
	case "get", "pause", "resume":
		c := newCommand("schedules "+sub, stdout, stderr)
		pos, err := c.parse(args, 1, "NAME")
		if err != nil {
			return err
		}
		method, path := http.MethodPost, "/v1/schedules/"+escape(pos[0])
		if sub == "get" {
			method = http.MethodGet
		} else {
			path += "/" + sub
		}
		var s schedule.Schedule
		if err := c.get(ctx, method, path, nil, &s); err != nil || c.json() {
			return err
		}
		return printSchedules(stdout, []schedule.Schedule{s})
	case "trigger":
		c := newCommand("schedules trigger", stdout, stderr)
		pos, err := c.parse(args, 1, "NAME")
		if err != nil {
			return err
		}
		var j job.Job
		if err := c.get(ctx, http.MethodPost, "/v1/schedules/"+escape(pos[0])+"/trigger", nil, &j); err != nil || c.json() {
			return err
		}
		return printJob(stdout, j)
	}
	return usagef("%s", schedulesUsage)
}

// leasehold schedules create|update NAME CRON KIND [--timezone] [--overlap] [the job flags of submit]
//
// update replaces the schedule's whole spec, as create would have made it,
// and keeps its history (last run and job, paused).
func saveSchedule(ctx context.Context, sub string, args []string, stdout, stderr io.Writer) error {
	c := newCommand("schedules "+sub, stdout, stderr)
	tz := c.fs.String("timezone", "", "IANA time zone the cron fields are read in (default UTC)")
	overlap := c.fs.String("overlap", "", "allow (default) or skip: no fire while the last job has not ended")
	jf := newJobFlags(c.fs)
	pos, err := c.parse(args, 3, "NAME CRON KIND   (CRON quoted: '0 3 * * *', @hourly, '@every 30s')")
	if err != nil {
		return err
	}
	submission, err := jf.submission(pos[2])
	if err != nil {
		return err
	}
	body := map[string]any{"name": pos[0], "cron": pos[1], "job": submission}
	if *tz != "" {
		body["timezone"] = *tz
	}
	if *overlap != "" {
		body["overlap"] = *overlap
	}
	method, path := http.MethodPost, "/v1/schedules"
	if sub == "update" {
		method, path = http.MethodPut, path+"/"+escape(pos[0])
	}
	var s schedule.Schedule
	if err := c.get(ctx, method, path, body, &s); err != nil || c.json() {
		return err
	}
	return printSchedules(stdout, []schedule.Schedule{s})
}

func printSchedules(w io.Writer, list []schedule.Schedule) error {
	t := table(w)
	fmt.Fprintln(t, "NAME\tCRON\tTIMEZONE\tOVERLAP\tPAUSED\tNEXT\tLAST\tLAST_JOB\tKIND")
	for _, s := range list {
		last := "-"
		if s.LastJobID != nil {
			last = *s.LastJobID
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%t\t%s\t%s\t%s\t%s\n", s.Name, s.Cron, s.Timezone, s.Overlap, s.Paused,
			when(s.NextRunAt), when(s.LastRunAt), last, s.Job.Kind)
	}
	return t.Flush()
}
