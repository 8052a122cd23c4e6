package cli

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"

	"github.com/leasehold/leasehold/execution"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/schedule"
)

// Scheduler returns the run.Group actor that fires due schedules
// (schedule.Scheduler) until the group stops. Every API and worker
// process runs one: there is no leader, and any of them may die.
// Fired jobs are held to the API's rules (the keys a tenant may name),
// and count in the tenants' usage, as every job does (store.Store); meters
// gets how late each fire was.
func Scheduler(ctx context.Context, rdb redis.UniversalClient, prefix string, nc *nats.Conn, limits schedule.Limits, log *slog.Logger, meters metric.MeterProvider) (func() error, func(error), error) {
	jobs := store.New(rdb, store.Config{Prefix: prefix, OnlyLimitedKeys: true})
	store, err := schedule.NewStore(rdb, schedule.Config{Prefix: prefix, Waker: execution.NewWaker(nc, prefix, log), Jobs: jobs})
	if err != nil {
		return nil, nil, err
	}
	s, err := schedule.NewScheduler(store, schedule.SchedulerConfig{Limits: limits, Logger: log, MeterProvider: meters})
	if err != nil {
		return nil, nil, err
	}
	ctx, stop := context.WithCancel(ctx)
	return func() error { return s.Run(ctx) }, func(error) { stop() }, nil
}
