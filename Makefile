# Leasehold — `make` lists the targets.
.DEFAULT_GOAL := help

GO            ?= go
STATICCHECK   := honnef.co/go/tools/cmd/staticcheck@v0.8.2
BIN           := bin

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_\/-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# Built, then started: `go run` exits 1 after any Ctrl-C, whatever its
# program's exit, and make would report every stop as an error.
.PHONY: run
run: ## Start API, worker, NATS and Redis on defaults (data in .dev/).
	$(GO) build -o $(BIN)/leasehold ./cmd/leasehold
	$(BIN)/leasehold dev

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

# Two minutes (LEASEHOLD_SOAK=5m for longer) of the built API and two
# workers under a hostile tenant (whole-share token estimates, streams cut
# short, a lane per job) beside a quiet one; docs/operations.md reads its
# figures.
.PHONY: soak
soak: ## Soak the built binaries under mixed tenants; checks the tpm counter, the logs and the quiet tenant's latency.
	$(GO) test -tags soak -count=1 -run '^TestSoak$$' -v -timeout 15m ./internal/e2e/

.PHONY: test/race
test/race: ## Run the tests three times over with the race detector, to shake out flakes.
	$(GO) test -race -count=3 -timeout 30m ./...

# An OpenAPI linter independent of the Go library the contract tests use:
# clients are generated from the document by other tools.
REDOCLY := @redocly/cli@2.77.0

.PHONY: lint
lint: lint/binaries ## No tracked executable binary, go.mod as go mod tidy writes it, go vet, a pinned staticcheck, and a pinned OpenAPI linter on docs/openapi.yaml.
	$(GO) mod tidy -diff
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	npx --yes $(REDOCLY) lint --format=stylish docs/openapi.yaml

# A committed build output goes stale with every commit and weighs on every
# clone. The check reads each tracked file's first bytes (ELF, Mach-O, fat
# Mach-O, PE's "MZ") with od, which every POSIX system has; file(1) may not.
.PHONY: lint/binaries
lint/binaries: ## Fail when git tracks an executable binary.
	@git ls-files | { bad=0; while IFS= read -r f; do \
		[ -f "$$f" ] || continue; \
		case $$(od -An -tx1 -N4 "$$f" | tr -d ' \n') in \
		7f454c46|feedface|feedfacf|cefaedfe|cffaedfe|cafebabe|4d5a*) \
			echo "lint: $$f is an executable binary; build outputs belong in .gitignore, not in git"; bad=1;; \
		esac; \
	done; exit $$bad; }

# Native Go fuzz targets, each run for FUZZTIME. Their seed corpora under
# testdata/fuzz/ run with every `make test`.
FUZZTIME ?= 30s
FUZZ     := ./internal/store:FuzzParseCursor ./job:FuzzLastEventID ./job:FuzzValidateLimitKey ./job:FuzzCanonical \
            ./internal/httpapi:FuzzSubmission ./internal/httpapi:FuzzIdempotencyKey ./internal/httpapi:FuzzObjectMembers \
            ./internal/store/scripts:FuzzUnpack

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 30s).
	@set -e; for t in $(FUZZ); do \
		echo "fuzz $${t#*:} in $${t%%:*} for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZTIME) "$${t%%:*}"; \
	done

.PHONY: bench
bench: ## Run the benchmarks (figures go to docs/benchmarks.md).
	$(GO) test -run '^$$' -bench . -benchtime 1x ./execution/
	$(GO) test -run '^$$' -bench . ./lease/ ./fencing/ ./cancel/ ./internal/store/

# Leasehold beside asynq v0.26 (issue 23's goals), three interleaved
# rounds of 20 000 no-op jobs at concurrency 10, 50 and 200; the script
# and asynq's side live beside the repository on the team's machines.
VS_ASYNQ = ../shared/bench/vs-asynq.sh
.PHONY: bench/vs-asynq
bench/vs-asynq: ## BenchmarkThroughput beside asynq, median ratios of three rounds (needs $(VS_ASYNQ)).
	@test -x "$(VS_ASYNQ)" || { echo "$(VS_ASYNQ) not found: set VS_ASYNQ to the side-by-side script"; exit 1; }
	@$(VS_ASYNQ) $(CURDIR) 3

# About half an hour: each of three modes (adaptive, fixed at the
# capacity, fixed at 4x) steps a fake upstream's hidden capacity through
# five 2 min phases (LEASEHOLD_BENCH_PHASE=30s for the stress case;
# LEASEHOLD_BENCH_MODES=adaptive runs one mode, LEASEHOLD_BENCH_TRACE=1
# prints the law's moves, for quick iterations on it).
.PHONY: bench/utilisation
bench/utilisation: ## Utilisation and 429s of an adaptive limit against fixed ones, before a hidden capacity that steps.
	$(GO) test -run '^$$' -bench '^BenchmarkUtilisation$$' -benchtime 1x -timeout 60m ./kinds/

# Wall-clock figures on shared machines move by a third from run to run;
# instruction counts do not. These run a benchmark with its redis-server
# under callgrind (through a wrapper first in PATH) and count Redis's
# instructions from the clock's start to its stop, per job: compare two
# commits with them. bench/instructions: BenchmarkThroughput at
# concurrency 200 (20 000 jobs), and bench/instructions/c10 at 10, where a
# claim and a finish take a few jobs each; bench/instructions/wait: BenchmarkWaitCycle
# (2 000 jobs run once, then 2 000 that wait and are signalled; a dump
# each, in that order); bench/instructions/batch: BenchmarkSubmitBatch
# (three batches of 1 000).
REDIS_SERVER = $(shell command -v redis-server)
CALLGRIND_REDIS = test -n "$(REDIS_SERVER)" || { echo "redis-server not found: apt-get install -y redis-server"; exit 1; }; \
	mkdir -p .bench/bin && rm -f .bench/callgrind.* && \
	printf '\#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file=$(CURDIR)/.bench/callgrind.%%p $(REDIS_SERVER) "$$@"\n' > .bench/bin/redis-server && \
	chmod +x .bench/bin/redis-server && \
	PATH="$(CURDIR)/.bench/bin:$$PATH" LEASEHOLD_BENCH_CALLGRIND=1

.PHONY: bench/instructions bench/instructions/c10 bench/instructions/wait bench/instructions/batch
bench/instructions: ## Count Redis instructions per job (valgrind), to compare commits.
	@$(CALLGRIND_REDIS) $(GO) test -run '^$$' -bench '^BenchmarkThroughput$$/^concurrency=200$$' -benchtime 1x ./execution/
	@awk '/^summary:/ {printf "Redis instructions per job: %.0f\n", $$2 / 20000}' .bench/callgrind.*.1

bench/instructions/c10: ## Count Redis instructions per job at concurrency 10 (valgrind).
	@$(CALLGRIND_REDIS) $(GO) test -run '^$$' -bench '^BenchmarkThroughput$$/^concurrency=10$$' -benchtime 1x ./execution/
	@awk '/^summary:/ {printf "Redis instructions per job: %.0f\n", $$2 / 20000}' .bench/callgrind.*.1

bench/instructions/batch: ## Count Redis instructions per job of a batch submit of 1 000 (valgrind).
	@$(CALLGRIND_REDIS) $(GO) test -run '^$$' -bench '^BenchmarkSubmitBatch$$' -benchtime 3x ./internal/store/
	@awk '/^summary:/ {printf "Redis instructions per job: %.0f\n", $$2 / 3000}' .bench/callgrind.*.1

bench/instructions/wait: ## Count Redis instructions of a wait-and-resume cycle against one plain run (valgrind).
	@$(CALLGRIND_REDIS) $(GO) test -run '^$$' -bench '^BenchmarkWaitCycle$$' -benchtime 1x ./execution/
	@ls -tr .bench/callgrind.*.1 | xargs awk '/^summary:/ {printf "Redis instructions per job: %.0f\n", $$2 / 2000}'
