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
DOCS_EXTRA := $(VENV)/.installed-docs-$(SUM)
# pip says nothing for long stretches (resolving, unpacking large wheels): a line at least this often (s)
# tells that the install is still at work. The first `make ab` was silent for 118 s.
HEARTBEAT_S ?= 8

.PHONY: ab test lint install docs

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

$(DOCS_EXTRA): $(PACKAGE)
	$(call install,-e '.[docs]',the docs extra (mkdocs))
	@touch $@

# The documentation site from docs/*.md (mkdocs.yml's navigation) into site/; a broken link or a page
# left out of the navigation fails it (--strict).
docs: $(DOCS_EXTRA)
	$(VENV)/bin/mkdocs build --strict --site-dir site

# The demo's own folder: each `make ab` replaces the last demo (spec-ab refuses other folders with results).
ab: $(PACKAGE)
	$(VENV)/bin/spec-ab --out runs/demo --overwrite $(AB_ARGS)

# The whole suite in two phases (with PYTEST_ARGS: one pytest run of just those). First the real-vLLM tier
# (tests/vllm: each `vllm serve` spends ~40 s of core 0 starting, where its servers are pinned) beside the unit
# and hostile tiers, which judge no timings, on core 1 (unpinned they slowed each start twofold); its output
# follows theirs. Then the end-to-end tier alone: it pins servers and Locust to
# cores of their own and judges what it measures, so nothing else runs beside it. Run one after the other,
# the suite took 2024 s of CI's 30 minutes. (Exit 5, no test collected: LOCUST_SPEC_SKIP_VLLM=1 deselected the
# tier.)
# Beside the vLLM tier: what judges no timing. The Kubernetes and Compose files' end-to-end tests run their
# commands and check the files they leave, the live page's browser test what it draws; the rest of the
# end-to-end tier judges what it measures.
BESIDE_VLLM := tests/unit tests/hostile tests/e2e/test_k8s_jobs.py tests/e2e/test_docker_scripts.py \
	tests/e2e/test_live_browser.py
# Each tier's wall seconds are printed at the end; with TIMES=FILE they are appended there too, one
# `tier<TAB>seconds` line each, for CI's budget guard (.ci/budget.py, which states the budgets).

test: $(EXTRAS)
ifdef PYTEST_ARGS
	$(PY) -m pytest $(PYTEST_ARGS)
else
	@tmp=$$(mktemp -d); t0=$$(date +%s); \
	echo "make test: the real-vLLM tier runs beside the tests that judge no timing" \
	    "(its output in $$tmp/vllm.log, shown when they end); then the end-to-end tier alone"; \
	( $(PY) -m pytest tests/vllm --basetemp=$$tmp/vllm >$$tmp/vllm.log 2>&1; real=$$?; \
	  echo $$(( $$(date +%s) - t0 )) >$$tmp/vllm.s; exit $$real ) & vllm=$$!; \
	pin=; if command -v taskset >/dev/null && [ $$(nproc) -gt 1 ]; then pin="taskset -c 1"; fi; \
	$$pin $(PY) -m pytest $(BESIDE_VLLM) --basetemp=$$tmp/fast; fast=$$?; t1=$$(date +%s); \
	echo "make test: waiting for the real-vLLM tier"; wait $$vllm; real=$$?; cat $$tmp/vllm.log; \
	[ $$real -ne 5 ] || real=0; t2=$$(date +%s); \
	$(PY) -m pytest tests $(patsubst %,--ignore=%,$(BESIDE_VLLM)) --ignore=tests/vllm \
	    --basetemp=$$tmp/e2e; e2e=$$?; t3=$$(date +%s); \
	echo "make test: unit, hostile and files exit $$fast, real vLLM exit $$real, end-to-end exit $$e2e"; \
	times=$$(printf '%s\t%s\n' "unit, hostile and files" $$((t1 - t0)) "real vLLM" "$$(cat $$tmp/vllm.s)" \
	    "end-to-end" $$((t3 - t2)) "make test" $$((t3 - t0))); \
	echo "make test: seconds per tier (wall):"; echo "$$times" | sed 's/^/  /'; \
	[ -z "$(TIMES)" ] || echo "$$times" >>"$(TIMES)"; \
	test $$fast -eq 0 -a $$real -eq 0 -a $$e2e -eq 0
endif

lint: $(EXTRAS)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
