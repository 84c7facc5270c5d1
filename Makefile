# The two set-up commands of the README: `make demo` and `make test`. Each makes its own venv.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch 2.13.0 is the CPU build on this project's machines; never pull a CUDA build into CI.
TORCH ?= torch==2.13.0
STEPS ?= 3

.PHONY: demo test lint typecheck venv clean

$(BIN)/activate:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/activate
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[dev,fast-gzip,ray,callbacks,store,postgres]"
	touch $@

venv: $(VENV)/.installed

demo: venv
	$(BIN)/opscope demo --steps $(STEPS)

lint: venv
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: venv
	$(BIN)/mypy

# Two workers (one test file each at a time: module fixtures built once), then the tests whose
# timing a busy core could move, alone. WORKERS=0 runs everything in this process.
WORKERS ?= 2
test: lint typecheck
ifeq ($(WORKERS),0)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)
else
	$(BIN)/python -m pytest -q -n $(WORKERS) --dist loadfile -m "not timing" $(PYTEST_ARGS) \
	  || [ $$? -eq 5 ]  # (5: PYTEST_ARGS picked no such test)
	$(BIN)/python -m pytest -q -m timing $(PYTEST_ARGS) || [ $$? -eq 5 ]
endif

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# The timing-touching tests (pytest -m timing) N times with one core kept busy; failures per test.
.PHONY: steady-tests
steady-tests: venv
	$(BIN)/python benchmarks/steady_tests.py --runs $(or $(RUNS),10) $(STEADY_ARGS)
