# The two set-up commands: `make demo` and `make test` (each installs what it needs first).
.PHONY: bootstrap build-ext demo test lint bench

DEMO_ARGS ?=
PYTEST_ARGS ?=
# TEST_WORKERS=N runs the suite in N processes, a test file's tests together in one (its
# module's cluster started once); each worker starts its own session cluster, and port blocks
# and the loopback qdisc are reserved across processes. 0 (the default) runs it in this
# process: on a 2-core machine the suite is CPU-bound (31 CPU-minutes in one process, 43-49 in
# two workers that contend), and two workers took 32-36 minutes against 38-39 in one, with more
# timing failures. Measured again on 2026-12-04 (clean clone, each worker its own clusters):
# two workers 24.3 minutes against 37.6 in one, but two timing reruns and one test skipped (by
# its times, the paused-broker end-to-end test on its precondition, a loaded machine), and a
# cluster test with no timing mark failed once in a smaller two-worker run. (Grouping every
# real-cluster test into one worker with xdist_group does not work here: xdist 3.8 renames a
# test's node id through an attribute pytest 9.2 no longer reads.)
TEST_WORKERS ?= 0

bootstrap:
	@bash scripts/bootstrap.sh

# The request log's compiled block scanner (agent/requestlog/scanner.py loads it; without it the
# agent reads the log by the pure-Python path and says so).
SCAN_SO := agent/requestlog/_scan.so
build-ext: $(SCAN_SO)

$(SCAN_SO): agent/requestlog/_scan.c
	cc -O2 -Wall -Wextra -shared -fPIC -o $@ $<

demo: bootstrap
	.venv/bin/linkwatch demo $(DEMO_ARGS)

test: bootstrap
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check .
