# The commands people and CI use. README's Quick start runs `make demo` and `make test`.
PYTHON ?= python3
PIP := $(PYTHON) -m pip

.PHONY: install demo test-system test-deps test-clis test lint fmt bench-deps bench

install:
	$(PIP) install -q -e .

# Weft's main job, offline: run the example hank on the built-in fake agent.
demo: install
	weft run examples/hello

# `ray` is the optional engine of `weft batch --engine ray`; the suite runs it on a local instance.
test-deps:
	$(PIP) install -q -e ".[test,ray,otel]"

# The pinned real Claude Code and Codex CLIs (PyPI wheels, cached outside the venv) that
# tests/agents/real drives against local mock model servers. Already there: a no-op.
test-clis:
	$(PYTHON) scripts/install_test_clis.py

# Chromium and its driver, SQLite's development files and fish (scripts/install_test_system.sh:
# installed as root, else named and the run stops). Before test-deps: the core's build links SQLite.
test-system:
	bash scripts/install_test_system.sh

# The whole suite: Rust unit and integration tests, then pytest. The WEFT_REQUIRE_* variables make
# a missing real CLI, Ray, browser or fish a failure instead of a skip, so no test is skipped
# because something was not installed.
test: test-system test-deps test-clis
	cargo test --workspace
	WEFT_REQUIRE_REAL_CLIS=1 WEFT_REQUIRE_RAY=1 WEFT_REQUIRE_BROWSER=1 WEFT_REQUIRE_FISH=1 \
		$(PYTHON) -m pytest

lint: test-deps
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy --workspace --all-targets --features python -- -D warnings
	ruff check python tests benches examples
	ruff format --check python tests benches examples
	mypy
	$(PYTHON) -m mypy.stubtest weft._core

fmt:
	cargo fmt --all
	ruff format python tests benches examples
	ruff check --fix python tests benches examples

# Benchmarks need the release build that `install` makes; they refuse a debug one. The
# peers extra (LangGraph, DBOS) is what benches/test_bench_peers.py compares Weft with, and
# ray what the batch benchmark's Ray variant runs on: installed here, so none is skipped.
bench-deps:
	$(PIP) install -q -e ".[test,ray,peers]"

bench: bench-deps
	$(PYTHON) -m pytest benches --benchmark-only --benchmark-columns=min,median,mean,ops,rounds
