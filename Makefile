# The two set-up commands: `make demo` and `make test` (each installs what it needs first).
.PHONY: bootstrap demo test lint bench

DEMO_ARGS ?=
PYTEST_ARGS ?=

bootstrap:
	@bash scripts/bootstrap.sh

demo: bootstrap
	.venv/bin/linkwatch demo $(DEMO_ARGS)

test: bootstrap
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/pytest $(PYTEST_ARGS)

lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check .
