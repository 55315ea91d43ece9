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

play: venv
	@echo "The browser player arrives with issue 5 (real-time engine and player)."
	@echo "Until then: '$(BIN)/gamengen record --help' and '$(BIN)/gamengen data --help'."

clean:
	rm -rf $(VENV) .pytest_cache
