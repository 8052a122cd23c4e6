// Package telemetry installs the OpenTelemetry tracer provider of a
// Leasehold command from the standard OTEL_* environment variables. Only
// cmd/ calls it: libraries take a trace.TracerProvider in their Config and
// default to the global one, which stays a no-op unless Setup installed an
// exporter.
package telemetry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// flushTimeout bounds the flush of buffered spans on exit.
const flushTimeout = 5 * time.Second

// Enabled reports whether getenv asks for traces: OTEL_TRACES_EXPORTER is
// set to something other than "none", or an OTLP endpoint is given, and
// OTEL_SDK_DISABLED is not "true". Tracing is off by default, so a
// deployment that configures nothing pays nothing.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch exp := getenv("OTEL_TRACES_EXPORTER"); {
	case exp == "none":
		return false
	case exp != "":
		return true
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup installs a global tracer provider exporting to what the OTEL_*
// variables name (OTEL_TRACES_EXPORTER otlp or console; OTLP over
// OTEL_EXPORTER_OTLP_PROTOCOL grpc or http/protobuf to
// OTEL_EXPORTER_OTLP_ENDPOINT; the sampler from OTEL_TRACES_SAMPLER), and
// the W3C trace-context and baggage propagators. The service is named by
// OTEL_SERVICE_NAME, else service. When tracing is not Enabled it installs
// nothing. The returned stop flushes the spans still buffered, for up to
// flushTimeout: defer it.
func Setup(ctx context.Context, service string, log *slog.Logger) (stop func(), err error) {
	if !Enabled(os.Getenv) {
		return func() {}, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("telemetry: span exporter: %w", err)
	}
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (read by WithFromEnv)
	// win over the command's own name.
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(service)),
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost(), resource.WithProcessPID())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, errors.Join(fmt.Errorf("telemetry: resource: %w", err), exp.Shutdown(ctx))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	log.Info("tracing on", "exporter", cmp.Or(os.Getenv("OTEL_TRACES_EXPORTER"), "otlp"))
	return func() {
		// Spans of a job cancelled by the shutdown are still worth sending.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
		defer cancel()
		if err := tp.Shutdown(fctx); err != nil {
			log.Warn("tracing: spans not flushed", "error", err)
		}
	}, nil
}
