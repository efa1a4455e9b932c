# The two commands a new user types: `make demo` (main job) and `make test`.
# Both create or refresh .venv with Python 3.12 from pyproject.toml; `make test` also runs
# the linters (ruff lint + format check, pyright basic) before the tests.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@PY312=$$(scripts/find-python312); \
	  test -x $(PY) || $$PY312 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --retries 10 --resume-retries 10 -e '.[test]'  # torch is 530 MB: resume a cut download
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/robotrl demo

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/pyright
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q

clean:
	rm -rf $(VENV) outputs
