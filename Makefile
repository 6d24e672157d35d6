# The two commands a newcomer needs:
#   make run    start the local stack and the three services (Ctrl-C stops the services)
#   make test   start the local stack and run every test (lint, unit and integration with -race)
SHELL := /bin/bash
GO ?= go
STACK := deploy/local/stack
STATE ?= $(CURDIR)/.state

# What --version and the seckill_build_info metric report (GOFLAGS may hold -buildvcs=false,
# so the revision is passed too rather than left to Go's VCS stamp).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X github.com/seckill-pipeline/seckill/pkg/buildinfo.version=$(VERSION) \
	-X github.com/seckill-pipeline/seckill/pkg/buildinfo.revision=$(REVISION)

.PHONY: run test lint chaos hotrow bench stack-up stack-down stack-status build vet unit clean docker-env

stack-up:
	$(STACK) up

stack-down:
	$(STACK) down

stack-status:
	$(STACK) status

build:
	mkdir -p bin
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/ ./gateway ./consumer ./reconciler

# Shellcheck on every shell script, the stack script's installation test, docker-compose.yml
# against the Compose specification's schema and hadolint on the Dockerfile (.ci/lint installs
# its tools: shellcheck from Debian, the rest in a venv under ~/.cache/seckill).
lint:
	.ci/lint

# Writes .env once (the secrets docker compose reads); an existing .env is kept.
docker-env:
	deploy/docker/env

vet:
	$(GO) vet ./...

# Lint first (seconds), then unit and integration tests together, all under the race
# detector; integration tests find the stack through the SECKILL_* variables the stack writes
# to .state/env. Then the short chaos set (happy path and three fast faults), alone, so its
# crowd does not slow the others.
test: lint stack-up vet
	set -a && source $(STATE)/env && set +a && $(GO) test -race -count=1 -timeout 20m ./...
	set -a && source $(STATE)/env && set +a && $(GO) run ./cmd/chaos -short

# The whole failure matrix of DESIGN.md (about 5 minutes); fails on any violated invariant.
chaos: stack-up
	set -a && source $(STATE)/env && set +a && $(GO) run ./cmd/chaos $(CHAOS_FLAGS)

# Benchmarks (about 5 minutes): results.json, results.md and chart.png under results/<time>/.
bench: stack-up
	set -a && source $(STATE)/env && set +a && $(GO) run ./cmd/bench $(BENCH_FLAGS)

# Hot-row persistence: the consumer's batched transaction vs one transaction per order.
hotrow: stack-up
	set -a && source $(STATE)/env && set +a && $(GO) run ./cmd/hotrow

# Tests that need no servers (integration tests skip when the stack is absent and CI unset).
unit:
	$(GO) test -race -count=1 ./...

run: stack-up build
	deploy/local/run

clean: stack-down
	rm -rf bin
