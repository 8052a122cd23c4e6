package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/httpapi"
)

// leasehold workers
func runWorkers(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("workers", stdout, stderr)
	if _, err := c.parse(args, 0, ""); err != nil {
		return err
	}
	var list httpapi.WorkerList
	if err := c.get(ctx, http.MethodGet, "/v1/workers", nil, &list); err != nil || c.json() {
		return err
	}
	t := table(stdout)
	fmt.Fprintln(t, "ID\tHOST\tQUEUES\tKINDS\tRUNNING\tSTARTED\tHEARTBEAT")
	for _, w := range list.Workers {
		host := w.Host
		if host == "" {
			host = "-" // a tenant is not shown the host
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", w.ID, host, strings.Join(w.Queues, ","), strings.Join(w.Kinds, ","),
			w.Running, w.StartedAt.UTC().Format(time.RFC3339), w.HeartbeatAt.UTC().Format(time.RFC3339))
	}
	return t.Flush()
}
