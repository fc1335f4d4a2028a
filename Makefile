# pg_hudi — the commands the README names. Each one installs what it needs first.
#   make run     build, install, start a throwaway PostgreSQL 15 with pg_hudi, run sql/demo.sql
#   make test    every test layer (engine, pg_test, pg_regress, Python interop)
#   make demo-multi  two PostgreSQL servers and one S3 server (moto) writing one table at once
#   make stop    stop the cluster that `make run` left running
#   make bench   the benchmarks in bench/
# Overridable: PG_CONFIG, BUILD (clusters, venv, warehouse), CARGO_TARGET_DIR (shared builds).

SHELL := /bin/bash
export PG_CONFIG ?= /usr/lib/postgresql/15/bin/pg_config
export BUILD ?= $(CURDIR)/build
export CARGO_TARGET_DIR ?= $(HOME)/.cache/pg_hudi/target

.PHONY: run demo-multi test stop bench deps install test-engine test-pg test-regress test-interop

run:
	@scripts/run.sh

demo-multi:
	@scripts/deps.sh
	@scripts/install.sh
	@source scripts/common.sh && PG_HUDI_RUN_DIR=$$(run_dir) $(BUILD)/venv/bin/python scripts/demo_multi.py

test:
	@scripts/test.sh all

# One layer alone.
test-engine test-pg test-regress test-interop:
	@scripts/test.sh $(@:test-%=%)

stop:
	@scripts/run.sh stop

bench:
	@scripts/deps.sh
	@shopt -s nullglob; benches=(bench/*/run.sh); \
	  if [ $${#benches[@]} -eq 0 ]; then echo "bench: no benchmarks yet"; fi; \
	  for b in "$${benches[@]}"; do echo "=== $$b"; bash "$$b" || exit 1; done

deps:
	@scripts/deps.sh

install:
	@scripts/deps.sh system
	@scripts/install.sh
