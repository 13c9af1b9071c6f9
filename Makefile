# Shared by developers and CI (.ci/run calls `make test`).
.DEFAULT_GOAL := help
PYTHON ?= python3

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

.PHONY: install
install: ## install system packages (apt) and the package with its test extras (editable)
	./scripts/install-deps

.PHONY: build-dev
build-dev: ## rebuild the Rust extension in place
	$(PYTHON) -m pip install -q --no-build-isolation --no-deps -e .

.PHONY: format
format: ## format Python and Rust
	$(PYTHON) -m ruff format python tests benches examples
	$(PYTHON) -m ruff check --fix python tests benches examples
	cargo fmt

.PHONY: lint
lint: ## ruff, mypy (strict), stubtest, rustfmt and clippy, all warnings as errors
	$(PYTHON) -m ruff check python tests benches examples
	$(PYTHON) -m ruff format --check python tests benches examples
	$(PYTHON) -m mypy
	$(PYTHON) -m mypy.stubtest pinlater._pinlater
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings

.PHONY: test
test: install lint ## the whole suite: install, lint, Rust tests, Python tests (real servers)
	cargo test --quiet
	$(PYTHON) -m pytest -q

.PHONY: bench
bench: ## the Python benchmarks for real
	$(PYTHON) -m pytest benches/python --benchmark-enable -q
