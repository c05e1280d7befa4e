# The two quick-start commands: `make ab` (the A/B speculation verdict on the embedded simulator) and
# `make test` (the whole suite). Both create the virtualenv on first use: `make ab` installs the package
# alone, `make test` (and `make lint`, `make install`: a developer's virtualenv) adds the test extras
# (playwright, the Kubernetes validators, hypothesis, ...). Each install is stamped with pyproject.toml's
# checksum, so a change there installs again.
VENV ?= .venv
PY := $(VENV)/bin/python
SUM := $(shell cksum pyproject.toml | cut -d' ' -f1)
PACKAGE := $(VENV)/.installed-package-$(SUM)
EXTRAS := $(VENV)/.installed-test-$(SUM)
# pip says nothing for long stretches (resolving, unpacking large wheels): a line at least this often (s)
# tells that the install is still at work. The first `make ab` was silent for 118 s.
HEARTBEAT_S ?= 8

.PHONY: ab test lint install

# $(call install,PIP ARGUMENTS,WHAT): the virtualenv, an up-to-date pip, then `pip install`, with progress.
define install
	@echo "installing $(2) into $(VENV) (the first time takes a few minutes)"
	@( t=0; while sleep $(HEARTBEAT_S) >/dev/null 2>&1; do t=$$((t + $(HEARTBEAT_S))); \
	    echo "  ... still installing $(2) ($${t} s)"; done ) & beat=$$!; \
	trap 'kill $$beat 2>/dev/null' EXIT; \
	test -x $(PY) || python3 -m venv $(VENV) && \
	$(PY) -m pip install -q -U pip && \
	$(PY) -m pip install --progress-bar off $(1)
endef

$(PACKAGE): pyproject.toml
	$(call install,-e .,locust-spec)
	@rm -f $(VENV)/.installed-*
	@touch $@

$(EXTRAS): $(PACKAGE)
	$(call install,-e '.[test]',the test extras)
	@touch $@

install: $(EXTRAS)

ab: $(PACKAGE)
	$(VENV)/bin/spec-ab --out runs/demo

test: $(EXTRAS)
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(EXTRAS)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
