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
