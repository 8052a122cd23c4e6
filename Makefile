# Leasehold — `make` lists the targets.
.DEFAULT_GOAL := help

GO            ?= go
STATICCHECK   := honnef.co/go/tools/cmd/staticcheck@v0.8.2
BIN           := bin

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_\/-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: run
run: ## Start API, worker, NATS and Redis on defaults (data in .dev/).
	$(GO) run ./cmd/leasehold dev

.PHONY: test
test: ## Run every test, with the race detector, against a real redis-server and NATS.
	$(GO) test -race -count=1 -timeout 15m ./...

# Jaeger for test/e2e, built once into the user's cache. go install refuses
# jaeger@version (its go.mod has replace directives), so it is built inside
# its own module, where they apply.
JAEGER_VERSION := v1.76.0
JAEGER         := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/leasehold/jaeger-$(JAEGER_VERSION)

$(JAEGER):
	mkdir -p $(dir $@)
	dir=$$(cd / && $(GO) mod download -json github.com/jaegertracing/jaeger@$(JAEGER_VERSION) | sed -n 's/.*"Dir": "\(.*\)".*/\1/p') && \
		cd "$$dir" && $(GO) build -o $@ ./cmd/jaeger

.PHONY: test/e2e
test/e2e: $(JAEGER) ## Run the end-to-end tests of the built binaries, traces read back from a real Jaeger.
	LEASEHOLD_JAEGER=$(JAEGER) $(GO) test -race -count=1 -tags e2e -timeout 15m ./internal/e2e/

.PHONY: test/race
test/race: ## Run the tests three times over with the race detector, to shake out flakes.
	$(GO) test -race -count=3 -timeout 30m ./...

.PHONY: lint
lint: ## go vet and a pinned staticcheck.
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

.PHONY: bench
bench: ## Run the benchmarks (figures go to docs/benchmarks.md).
	$(GO) test -run '^$$' -bench . -benchtime 1x ./execution/
	$(GO) test -run '^$$' -bench . ./lease/ ./fencing/ ./cancel/ ./job/
