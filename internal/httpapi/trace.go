package httpapi

import (
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
)

// traced gives every request a server span with the http.* attributes,
// named "METHOD route" by the route ServeMux matched (the names of the
// request metrics), and joins the trace of a request that carries a
// traceparent header. The API's own instruments measure requests, so
// otelhttp's are turned off.
func traced(next http.Handler, tp trace.TracerProvider) http.Handler {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return otelhttp.NewHandler(next, "http.server",
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			if r.Pattern == "" || r.Pattern == "/" {
				return r.Method
			}
			return r.Method + " " + r.Pattern
		}))
}
