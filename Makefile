# Two commands on a fresh machine (Python 3.11 + pip): `make demo` and `make test`; while working,
# `make check`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo check test lint typecheck pytest docs dist sdist-check bench bench-quick fuzz mutate clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,docs]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

# The loop to run while working: lint, types and every test not marked slow, with the hostile
# fuzzers at 200 examples each (make test: 1,500). Four workers on two cores: many tests wait on
# sockets, timers and subprocesses (pytest alone, idle clean clone: 97 s with -n 2, 77 s with -n 4).
check: $(STAMP) lint typecheck
	HOSTILE_FUZZ_EXAMPLES=200 $(PY) -m pytest -q -m "not slow" -n 4 --dist worksteal

# Everything, slow tests included, and the 20 slowest printed so that they stay in sight. The
# suite reads the reference the docs target just built instead of running Sphinx again.
test: $(STAMP) lint typecheck docs
	GCMSTREAM_DOCS_HTML=$(CURDIR)/docs/_build/html $(PY) -m pytest -q --durations=20

lint: $(STAMP)
	$(PY) -m ruff check src tests examples benchmarks fuzz
	$(PY) -m ruff format --check src tests examples benchmarks fuzz

typecheck: $(STAMP)
	$(PY) -m mypy

pytest: $(STAMP)
	$(PY) -m pytest -q --durations=20

# The API reference from the docstrings (Sphinx autodoc); any warning fails the build. -E: every
# page read again, so a warning of an unchanged page is not hidden by an incremental build.
docs: $(STAMP)
	$(PY) -m sphinx -E -W --keep-going -q -b html docs docs/_build/html

# The wheel and the sdist in dist/ (tests/test_packaging.py builds and checks both).
dist: $(STAMP)
	rm -rf dist
	$(PY) -m build --outdir dist .

# The whole test suite run from the extracted sdist, against the sdist's own source.
sdist-check: dist
	rm -rf dist/check && mkdir dist/check
	tar xzf dist/gcmstream-*.tar.gz -C dist/check
	cd dist/check/gcmstream-* && PYTHONPATH=$$PWD/src $(abspath $(PY)) -m pytest -q -p no:cacheprovider

BENCH_STAMP := $(VENV)/.bench-installed

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e '.[test,bench]'
	touch $(BENCH_STAMP)

# Every benchmark part (< 10 min on 2 cores), then benchmarks/README.md and its chart.
bench: $(BENCH_STAMP)
	$(PY) benchmarks/run.py
	$(PY) benchmarks/render.py

# Every part on tiny sizes (seconds): a smoke test, not a measurement.
bench-quick: $(BENCH_STAMP)
	$(PY) benchmarks/run.py --quick

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis mutants docs/_build dist

# Coverage-guided fuzzing of the opener (atheris, libFuzzer); see fuzz/README.md.
FUZZ_SECONDS ?= 600
fuzz: $(STAMP)
	$(PY) -m pip install --quiet atheris
	mkdir -p fuzz/corpus-work fuzz/artifacts
	$(PY) fuzz/fuzz_opener.py -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -artifact_prefix=fuzz/artifacts/ fuzz/corpus-work fuzz/corpus

# Mutation testing of the sans-IO core (format.py, ring.py, direction.py, sealer.py, opener.py, channel.py) with its fast unit tests,
# configured in pyproject.toml [tool.mutmut]; CONTRIBUTING.md says how to read the result. Each
# run starts fresh in mutants/ (git-ignored) and ends with a score per module. MUTANTS narrows it
# to some mutants, e.g. make mutate MUTANTS='gcmstream.ring.*'.
MUTANTS ?=
MUTATE_STAMP := $(VENV)/.mutate-installed

$(MUTATE_STAMP): $(STAMP)
	$(PY) -m pip install --quiet 'mutmut>=3.8,<4'
	touch $(MUTATE_STAMP)

mutate: $(MUTATE_STAMP)
	rm -rf mutants
	$(VENV)/bin/mutmut run $(MUTANTS)
	$(VENV)/bin/mutmut results | grep -v ": not checked$$" || true
	@$(VENV)/bin/mutmut results --all true | awk -F': ' \
	  '{ split($$1, name, "."); module = name[2]; status = $$2 } \
	   status == "not checked" { next } \
	   { checked[module]++; count[module, status]++ } \
	   END { for (module in checked) { dead = count[module, "killed"] + count[module, "timeout"]; \
	     printf "%-7s %4d of %4d mutants killed (%.1f %%), %d survived, %d without tests\n", module, dead, \
	     checked[module], 100 * dead / checked[module], count[module, "survived"], count[module, "no tests"] } }'
