# The two commands a newcomer needs:
#   make run    start the local stack and the three services (Ctrl-C stops the services;
#               make run TRACING=1 also starts Jaeger and traces every purchase into it)
#   make test   start the local stack and run every test (lint, unit and integration with -race)
SHELL := /bin/bash
GO ?= go
STACK := deploy/local/stack
STATE ?= $(CURDIR)/.state
# The stack profile `make run` and the stack-* targets act on: single (one node each) or
# cluster (3 Kafka nodes, a 6-node Redis Cluster; make run PROFILE=cluster).
PROFILE ?= single

# What --version and the seckill_build_info metric report (GOFLAGS may hold -buildvcs=false,
# so the revision is passed too rather than left to Go's VCS stamp).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X github.com/seckill-pipeline/seckill/pkg/buildinfo.version=$(VERSION) \
	-X github.com/seckill-pipeline/seckill/pkg/buildinfo.revision=$(REVISION)

.PHONY: run test lint contract-fuzz chaos mutations chaos-cluster-short cluster-test secure-test hotrow bench stack-up stack-down stack-status build vet unit clean docker-env \
	monitor dashboard dashboard-check rules-test rules firedrill console-shots fresh-runs backup help

# Every target's line carries a "## " note: make help lists them, one line each.
help: ## list the targets with one line each
	@sed -nE 's/^([a-z][a-z-]*):[^=]*## (.*)$$/  \1\t\2/p' $(firstword $(MAKEFILE_LIST)) | expand -t 24

stack-up: ## start the local stack (PROFILE=single or cluster)
	$(STACK) up --profile $(PROFILE)

stack-down: ## stop the local stack (and the monitoring of make monitor, the Jaeger of make test and make run TRACING=1)
	$(STACK) down --profile $(PROFILE)

stack-status: ## show whether each server of the local stack is up
	$(STACK) status --profile $(PROFILE)

build: ## build gateway, consumer and reconciler into bin/
	mkdir -p bin
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/ ./gateway ./consumer ./reconciler

# Shellcheck on every shell script, the stack script's installation test, docker-compose.yml
# against the Compose specification's schema, hadolint on the Dockerfile, the alert rules and
# their unit tests (promtool), whether the dashboard JSON is up to date, staticcheck and
# govulncheck (pinned, from the module proxy) over the root module (.ci/lint installs its
# tools: shellcheck and prometheus from Debian, the rest in a venv under ~/.cache/seckill).
lint: ## static checks (.ci/lint): shell, compose, Dockerfile, alerts, dashboard, SQL, k8s, staticcheck, govulncheck
	.ci/lint

# The lint venv (.ci/lint makes it, with its pinned PyPI tools) holds Schemathesis.
LINT_VENV ?= $(or $(SECKILL_CACHE_DIR),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/seckill)/lint-venv

# The contract fuzzer (internal/contractfuzz, about 3 minutes): Schemathesis, every check, a
# fresh seed each run (printed, with the command that replays it) and a bounded number of
# examples, against both listeners of a real gateway on the stack (the admin API with the
# bearer token and again signed in as the console); fails on any disagreement between docs/api
# and the gateway. SEED replays a run's seed; EXAMPLES changes the number of examples.
FUZZ_FLAGS := $(if $(SEED),-seed $(SEED)) $(if $(EXAMPLES),-examples $(EXAMPLES))
contract-fuzz: lint stack-up ## Schemathesis against a real gateway, fails on any disagreement with docs/api (about 3 min)
	set -a && source $(STATE)/env && set +a && $(GO) test -count=1 -timeout 15m -run '^TestContractFuzz$$' -v \
		./internal/contractfuzz -schemathesis $(LINT_VENV)/bin/schemathesis $(FUZZ_FLAGS)

# Monitoring (deploy/monitoring, docs/runbook.md). `make monitor` starts Prometheus on
# http://127.0.0.1:19090 with the alert rules loaded, scraping the services of `make run`, and
# the Redis exporter (both Debian packages, installed when missing); `make stack-down` stops them.
# PROFILE=cluster: a Prometheus of its own on http://127.0.0.1:19091 scraping every instance of
# `make run PROFILE=cluster`, each Redis node (one exporter, multi-target) and each broker's JMX
# exporter agent; `make stack-down PROFILE=cluster` stops it with the cluster.
monitor: ## start Prometheus (127.0.0.1:19090; PROFILE=cluster: 19091) with the alert rules, scraping make run's services
	SECKILL_MONITORING=1 $(STACK) up --profile $(PROFILE)

# The Grafana dashboard is Go (deploy/monitoring/dashboard); the JSON is generated, never edited.
dashboard: ## regenerate the Grafana dashboard JSON from its Go generator
	$(GO) run ./deploy/monitoring/dashboard -o deploy/monitoring/dashboard/seckill.json

# Every dashboard query against the local Prometheus: fails on a query error, lists empty ones.
# PROFILE=cluster (make run PROFILE=cluster and make monitor PROFILE=cluster running): a crowd
# of its own through HAProxy for 75 s first (and on while the queries run), then fails on any
# query that returns nothing too (but the few marked as empty when healthy). About 2 minutes.
ifeq ($(PROFILE),cluster)
DASHBOARD_CHECK = set -a && source $(STATE)/dev-secrets && set +a && \
	$(GO) run ./deploy/monitoring/dashboard -check http://127.0.0.1:$${SECKILL_CLUSTER_PROMETHEUS_PORT:-19091} \
	-require-data -crowd 75s -gateway $${SECKILL_PROXY_ADDR:-127.0.0.1:8090} -admin 127.0.0.1:8191
else
DASHBOARD_CHECK = $(GO) run ./deploy/monitoring/dashboard -check http://127.0.0.1:$${SECKILL_PROMETHEUS_PORT:-19090}
endif
dashboard-check: ## run every dashboard query against the local Prometheus (PROFILE=cluster: under a crowd, all must return data)
	$(DASHBOARD_CHECK)

# The alert rules and their unit tests (also part of make lint). The tests run on the rules
# rendered with the base URL their expected runbook_url values name.
RULES_TEST_BASE := https://runbooks.example/seckill/runbook.md
rules-test: ## promtool: check the alert rules and run their unit tests
	promtool check rules deploy/monitoring/alerts.yml
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
		deploy/monitoring/rules $(RULES_TEST_BASE) $$tmp/alerts.yml && cp deploy/monitoring/alerts_test.yml $$tmp/ && \
		promtool test rules $$tmp/alerts_test.yml

# The rules to load into a Prometheus: every runbook_url made absolute with
# SECKILL_RUNBOOK_BASE_URL (where docs/runbook.md is published), written to RULES_OUT
# (default: standard output).
rules: ## write the alert rules with absolute runbook links (SECKILL_RUNBOOK_BASE_URL; RULES_OUT=file)
	deploy/monitoring/rules "$(SECKILL_RUNBOOK_BASE_URL)" $(or $(RULES_OUT),-)

# Makes real alerts fire against the services of `make run` and the Prometheus of `make
# monitor`, undoing each fault after (1 to 2.5 minutes a scenario; docs/operators.md,
# Monitoring): SCENARIO=conflicts, soldout, relay (drops need make run with a small
# SECKILL_RELAY_QUEUE), lease-stuck, or all (every scenario in turn, then alert by alert
# whether it fired; about 12 minutes). mysql-readonly, mysql-down and kafka-down act on the
# stack's own MariaDB and Kafka: never while tests use the stack.
# PROFILE=cluster: against make run PROFILE=cluster and make monitor PROFILE=cluster, faults on
# the cluster's nodes, each verified undone (the stack healthy again): SCENARIO=broker-down
# (the default), below-min-isr, replica-stopped, replica-lag, semisync-off, or all (about 16
# minutes). Never while tests or chaos runs use the cluster.
ifeq ($(PROFILE),cluster)
FIREDRILL_ENV = $(STATE)/cluster/env
else
FIREDRILL_ENV = $(STATE)/env
endif
firedrill: ## make real alerts fire (SCENARIO=conflicts, soldout, relay, lease-stuck, mysql-readonly, mysql-down, kafka-down, all; PROFILE=cluster: broker-down, below-min-isr, replica-stopped, replica-lag, semisync-off, all)
	set -a && source $(FIREDRILL_ENV) && source $(STATE)/dev-secrets && set +a && \
		SECKILL_STATE_DIR=$(STATE) $(GO) run ./deploy/monitoring/firedrill -profile $(PROFILE) $(if $(SCENARIO),-scenario $(SCENARIO)) -stack $(STACK)

# Writes .env once (the secrets docker compose reads); an existing .env is kept.
docker-env: ## write .env, the secrets docker compose reads (an existing one is kept)
	deploy/docker/env

vet: ## go vet ./...
	$(GO) vet ./...

# Lint first (seconds), then unit and integration tests together, all under the race
# detector; integration tests find the stack through the SECKILL_* variables the stack writes
# to .state/env. Then the contract fuzzer (see contract-fuzz), the short chaos set (each row's
# history checked too) and the mutation checks (see mutations), each alone, so their load does
# not slow the others.
# chromium for the console's browser tests (internal/consoletest fails under CI without it):
# the stack installs it only when asked; prerequisites (stack-up) inherit the variable.
test console-shots: export SECKILL_WITH_CHROMIUM := 1
# Jaeger (deploy/jaeger, built into the cache once) for the tests that read traces back
# (internal/jaegertest; with SECKILL_TRACING=1 they fail without it, else they skip): the
# stack starts it only when asked.
test: export SECKILL_TRACING := 1
test: lint stack-up vet ## lint, then every test with -race on the stack, the contract fuzzer, the short chaos set, the mutation checks
	set -a && source $(STATE)/env && set +a && $(GO) test -race -count=1 -timeout 20m ./...
	set -a && source $(STATE)/env && set +a && $(GO) test -count=1 -timeout 15m -run '^TestContractFuzz$$' \
		./internal/contractfuzz -schemathesis $(LINT_VENV)/bin/schemathesis
	set -a && source $(STATE)/env && set +a && $(GO) run ./cmd/chaos -short
	set -a && source $(STATE)/env && set +a && $(GO) run ./cmd/chaos -mutations

# The deliberately broken builds of internal/mutation, one per class of violation the chaos
# rows' history check claims to catch, each run against its row with the small crowd (about
# 4 minutes): fails unless each is caught (docs/design.md, Histories). Part of make test.
mutations: stack-up ## build each deliberately broken tree, run its chaos row, fail unless the history check catches it
	set -a && source $(STATE)/env && set +a && $(GO) run ./cmd/chaos -mutations $(CHAOS_FLAGS)

# The whole failure matrix of docs/design.md (about 5 minutes on the single node: 3 for the 13
# fault scenarios, 2 for the cancellation ones); fails on any violated invariant.
# PROFILE=cluster runs the cluster profile's matrix (brokers, Redis primaries, a gateway behind
# the proxy, consumer rebalances, reconciler takeover) against .state/cluster/env.
ENV_FILE := $(if $(filter cluster,$(PROFILE)),$(STATE)/cluster/env,$(STATE)/env)
chaos: stack-up ## the whole failure matrix against the stack (about 5 min; PROFILE=cluster for the cluster's)
	set -a && source $(ENV_FILE) && set +a && $(GO) run ./cmd/chaos $(CHAOS_FLAGS)

# The cluster profile's short set (one broker kill, a sale opening under a crowd above the
# admission limit through a leader kill, one Redis primary kill, one MariaDB primary kill and
# failover, small crowd): its own target and CI step, not part of make test (see
# docs/developers.md, Tests).
# The Go tests that need the cluster profile's Redis Cluster, which the single-profile run
# skips (stacktest.ClusterRedis): bucket keys on the primaries, the coalescer and pipelines
# across nodes, replica waits, and the cluster cases of the reconciler's bucket jobs. MySQL
# and Kafka are the single stack's; SECKILL_CLUSTER=1 makes a missing cluster a failure.
cluster-test: stack-up ## the Go tests that need the cluster profile's Redis Cluster
	$(STACK) up --profile cluster
	set -a && source $(STATE)/env && set +a && export SECKILL_CLUSTER=1 && \
		$(GO) test -race -count=1 -timeout 10m \
			-run '^(TestCluster.*|TestConnectDetectsCluster|TestAwaitReplicaOnCluster)$$' ./pkg/stock && \
		$(GO) test -race -count=1 -timeout 10m \
			-run '^(TestAdjustmentResumesAfterEveryStep|TestDriftPerBucket|TestRebalanceRound|TestRebuildJobRebuildsLostBuckets|TestTransferResumesAfterEveryStep)$$/^cluster$$' ./reconciler

chaos-cluster-short: cluster-test ## the cluster profile's Go tests, then its short chaos set
	$(STACK) up --profile cluster
	set -a && source $(STATE)/cluster/env && set +a && $(GO) run ./cmd/chaos -cluster -short $(CHAOS_FLAGS)

# The secure profile (deploy/local/secure.sh: Redis with TLS and ACL users, Kafka with
# SASL_SSL and ACLs, MariaDB requiring TLS; docs/operators.md, The secure profile): its refusal and
# own-user tests, the integration tests that open connections (Redis, Kafka, MySQL and the
# services' start-up), then the short chaos set, all against .state/secure/env. Its own target
# and CI step (about 6 minutes on 2 cores, the profile's first start included).
SECURE_STARTUP_TESTS := ^(TestGatewayStartsAndStops|TestGatewayRefuses.*|TestNoSecretInLogsOrErrors|TestPublicReadyzIsCheapAndQuiet|TestConsumerEndToEnd|TestConsumerRefusesEvictingRedis)$$
secure-test: ## the secure profile (credentials and TLS on every server): refusal and connection tests, short chaos set
	$(STACK) up --profile secure
	set -a && source $(STATE)/secure/env && set +a && \
		$(GO) test -race -count=1 -timeout 10m ./internal/securetest ./pkg/stock ./pkg/event ./pkg/store && \
		$(GO) test -race -count=1 -timeout 10m -run '$(SECURE_STARTUP_TESTS)' ./gateway ./consumer
	set -a && source $(STATE)/secure/env && set +a && $(GO) run ./cmd/chaos -short

# Benchmarks (about 12 minutes on 2 quiet cores): every step three times, interleaved, each
# figure the median (min-max); results.json, results.md (targets met/missed) and one chart per
# question (strategies.png, persistence.png, latency.png, stages.png, buckets.png) under
# results/<time>/. BENCH_FLAGS: -reps N, -only
# ceilings,gateway,salecurve,strategies,persistence,sale,buckets,open, -binlog=false (no
# MariaDB restarts), -quick (one small repetition: a smoke test, not a measurement),
# -compare REV|shipped (baseline and candidate in every repetition: docs/performance.md).
# PROFILE=cluster: 1 vs 2 gateways behind HAProxy and RF 3 / min ISR 2 vs RF 1, same crowd.
# Stock buckets alone: BENCH_FLAGS=-only buckets (Kafka -> MySQL of one hot prize in 1, 2, 4
# buckets); PROFILE=cluster BENCH_FLAGS=-only buckets (admissions, one primary vs three).
# The open of a sale under a crowd alone (vegeta, a Go tool dependency): BENCH_FLAGS=-only open
# (-open-connections N, -pin-generator).
bench: stack-up ## benchmarks (about 10 min; BENCH_FLAGS), results under results/<time>/
	set -a && source $(ENV_FILE) && set +a && $(GO) run ./cmd/bench $(BENCH_FLAGS)

# Hot-row persistence: the consumer's batched transaction vs one transaction per order.
hotrow: stack-up ## hot-row persistence: batched transaction vs one per order
	set -a && source $(STATE)/env && set +a && $(GO) run ./cmd/hotrow

# Screenshots of the operator console (docs/console/*.png, shown in docs/console.md and the
# README): real gateway, consumer and reconciler processes on the local stack with a demo sale,
# driven by headless chromium (installed by the stack when SECKILL_WITH_CHROMIUM=1, which this
# target and make test set). About 30 seconds.
console-shots: stack-up ## screenshots of the operator console into docs/console (headless chromium)
	set -a && source $(STATE)/env && set +a && \
		$(GO) test -count=1 -run '^TestConsoleShots$$' ./internal/consoletest -shots $(CURDIR)/docs/console

# The consumer and reconciler tests RUNS times in a row (default 10), each on a brand-new stack
# (a freshly formatted Kafka broker, a new MariaDB datadir, an empty Redis, on ports of their
# own beside every profile's), as CI has every time; prints "N passed, M failed". 2 to 3.5
# minutes a run on the 2-core machine while other tests ran. FRESH_PACKAGES picks others.
RUNS ?= 10
FRESH_PACKAGES ?= ./consumer ./reconciler
fresh-runs: ## the consumer and reconciler tests RUNS times, each on a brand-new stack
	deploy/local/fresh-runs -n $(RUNS) $(FRESH_PACKAGES)

# A hot backup of the local stack's MariaDB (deploy/local/backup take, mariadb-backup), prepared
# and ready to restore with deploy/local/backup restore; docs/operators.md, Backup and restore.
BACKUP_DIR ?= $(STATE)/backups/$(shell date -u +%Y%m%dT%H%M%SZ)
backup: stack-up ## hot backup of the stack's MariaDB into BACKUP_DIR (default .state/backups/<time>)
	deploy/local/backup take $(BACKUP_DIR)

# Tests that need no servers (integration tests skip when the stack is absent and CI unset).
unit: ## tests that need no servers (integration tests skip without the stack)
	$(GO) test -race -count=1 ./...

# TRACING=1: the stack starts Jaeger too (SECKILL_TRACING=1, the single profile) and the
# services send it every purchase's trace (deploy/local/run: OTEL_EXPORTER_OTLP_ENDPOINT,
# OTEL_TRACES_SAMPLER=parentbased_always_on); Jaeger's query address is printed with the rest
# (this Go build of Jaeger serves the API, not the UI pages: deploy/jaeger/README.md).
ifeq ($(TRACING),1)
run: export SECKILL_TRACING := 1
endif
run: stack-up build ## start the local stack and the three services (TRACING=1: and Jaeger, every purchase traced; Ctrl-C stops the services)
	PROFILE=$(PROFILE) deploy/local/run

clean: stack-down ## stop the stack and remove bin/
	rm -rf bin
