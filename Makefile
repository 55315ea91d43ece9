# `make test` and `make play` are the two commands a newcomer runs (see README.md).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: test play venv clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

# The stamp re-installs when pyproject.toml changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	touch $@

venv: $(VENV)/.installed

# Two workers, one per core; a worker runs whole test files (--dist loadfile), so a file's fixtures
# are built once. Session fixtures are built once per run (tests/conftest.py, built_once), and the
# workers share the cores: one compute thread each here (conftest sets OMP_NUM_THREADS).
test: venv
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=25

# The learned defend_the_center arena (ViZDoom; its 1-step student) in your browser; the URL with
# its per-launch token is printed. `make play MODEL=models/freedoom-e1m1` opens the paper's
# Freedoom E1M1 model, `MODEL=models/defend-the-center` the 4-step teacher.
MODEL ?= models/defend-the-center-1step
play: venv
	$(BIN)/gamengen play --model $(MODEL)

clean:
	rm -rf $(VENV) .pytest_cache
