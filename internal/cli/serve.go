package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// shutdownGrace is how long requests in flight get to finish at shutdown.
// Event streams and ?wait= requests do not end on their own: they are cut
// after it, and their clients reconnect (with Last-Event-ID) elsewhere.
const shutdownGrace = 10 * time.Second

// Metrics returns a meter provider whose instruments the handler serves in
// Prometheus text format, with the Go runtime's and the process's own.
// Shut the provider down when the process ends.
func Metrics() (*sdkmetric.MeterProvider, http.Handler, error) {
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return nil, nil, fmt.Errorf("metrics: %w", err)
	}
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter)), promhttp.HandlerFor(registry, promhttp.HandlerOpts{}), nil
}

// Serve returns an oklog/run actor that serves h on ln until interrupted,
// then shuts down gracefully.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger) (execute func() error, interrupt func(error)) {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// No WriteTimeout: event streams and ?wait= hold their responses open.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	execute = func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
	interrupt = func(error) {
		ctx, stop := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
		defer stop()
		if err := srv.Shutdown(ctx); err != nil {
			srv.Close() // cut what is still open: event streams, waits
		}
	}
	return execute, interrupt
}
