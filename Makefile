# The two set-up commands: `make demo` and `make test` (each installs what it needs first).
.PHONY: bootstrap build-ext demo test lint bench

DEMO_ARGS ?=
PYTEST_ARGS ?=
# TEST_WORKERS=N runs the suite in N processes (0: in this one), a test file's tests together in
# one (its module's cluster started once; tests/remediation and tests/agent whole, their package
# clusters started once), the units marked minutes(n) handed out first, longest first
# (tests/conftest.py); each worker starts its own session cluster, and port blocks and the
# loopback qdisc are reserved across processes. Two by default: on a clean clone of this 2-core
# machine `make test` took 17-18 minutes in two workers (2026-12-06: pytest 1,027-1,087 s,
# 2,163 tests, 0-1 timing reruns, 26.8-28.4 busy-CPU minutes) against 33.2 in one. Three took
# 17.5 (1,052 s) at 32.9 busy-CPU minutes: the machine saturated (a Spark session took 85 s to
# start against 25 in two) and a group join needed its rerun. The suite's CPU sets a floor: 27 busy-CPU
# minutes on 2 cores cannot take less than 13.5; two workers keep 1.5 cores busy on average, the
# rest is tests waiting on timeouts, holds and sessions. The machine's own speed varies: on
# 2026-12-07 the same head took 27.3 minutes at 49 busy-CPU minutes (each slow test about twice
# its time); the class archives (testbed/class_archive.py) then brought it to 22.3 at 37.6, and
# brokers without C2 (tests/conftest.py) to 19.8 at 31.7 (pytest 1,184 s, 2,178 tests, no rerun).
TEST_WORKERS ?= 2

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
