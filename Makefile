# The two set-up commands: `make demo` and `make test` (each installs what it needs first).
.PHONY: bootstrap build-ext demo test lint bench

DEMO_ARGS ?=
PYTEST_ARGS ?=
# TEST_WORKERS=N runs the suite in N processes (0: in this one), a test file's tests together in
# one (its module's cluster started once; tests/remediation and tests/agent whole, their package
# clusters started once, and the files that run a Spark driver in the worker's process together),
# the units marked minutes(n) handed out first, longest first (tests/conftest.py); each worker
# starts its own session cluster, and port blocks and the loopback qdisc are reserved across
# processes. Three by default: on a clean clone of this 2-core machine (2026-12-07) two workers
# took 1,120 s of pytest at 1,698 busy CPU-s (1.5 cores: the rest is tests waiting on timeouts,
# holds and sessions), three 1,015-1,057 s at 1,870-2,006 (a third session cluster and Spark
# driver; 1.84-1.9 cores), 0-1 timing reruns each; with the bytecode cache (below) `.ci/run`
# took 785, 858 and 885 s whole (780-880 s of pytest, 1,403-1,582 busy CPU-s, no rerun), 927 s
# with two timing reruns and 1,039 s with the alerting test's rerun. The suite is CPU-bound in
# three: its busy CPU-s over two cores is its floor, and the machine's own speed moves it: a fixed
# pure-Python loop (20 million multiply-adds) took 2.3 to 4.5 s on the quiet machine in one day.
TEST_WORKERS ?= 3

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

# The suite runs with Python's bytecode cache on, whatever PYTHONDONTWRITEBYTECODE says outside:
# it starts about a hundred Python processes (its workers, benches, agents, CLIs, Spark's Python
# workers) that import the same modules, and without the cache each compiles them from source
# again (pyspark, pandas, pyarrow, kafka and the analyzer: 5.5 CPU-s to import, 1.4 from the
# cache; a worker's collection of the suite 19.4 -> 5.4). The caches are __pycache__ directories
# in this tree (ignored by git) and in .venv.
test: bootstrap
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	env -u PYTHONDONTWRITEBYTECODE .venv/bin/pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check .
