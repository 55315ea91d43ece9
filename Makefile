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

test: venv
	$(BIN)/python -m pytest -q

# The learned Freedoom E1M1 in your browser; the URL with its per-launch token is printed.
# `make play MODEL=models/defend-the-center` opens the smaller world (ViZDoom's round arena).
MODEL ?= models/freedoom-e1m1
play: venv
	$(BIN)/gamengen play --model $(MODEL)

clean:
	rm -rf $(VENV) .pytest_cache
