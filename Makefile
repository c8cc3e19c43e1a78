# Every target creates .venv on first use with only python3 and pip, and installs only what it needs:
# `make demo` the product and the acp extra (1 MB: the ACP scenarios run; the Claude Code ones need the
# claude extra, which bundles the claude CLI, and /scenario marks them); `make test` adds the test tools and every provider's SDK;
# `make bench` adds the baselines (the openai SDK).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip install -q --disable-pip-version-check
# The suite runs on one pytest-xdist worker per CPU: every test is safe beside another (its own temp dirs,
# ports from the OS, its own HOME, only its own processes; docs/architecture.md, "Where the tests are").
# A module stays on one worker (loadfile): its module-scoped servers start once, and the few tests that
# read what earlier tests of their module recorded still find it. The options are pytest's own (addopts in
# pyproject.toml), so a bare `pytest` runs the suite the same way; `make test PARALLEL="-n 0"` runs it in
# one process.
PARALLEL ?=

.PHONY: demo test check lint typecheck bench clean npm-agents litellm

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.demo: pyproject.toml | $(BIN)/python
	$(PIP) -e '.[acp]'
	touch $@

$(VENV)/.test: pyproject.toml | $(BIN)/python
	$(PIP) -e '.[test]'
	touch $@

$(VENV)/.bench: pyproject.toml | $(BIN)/python
	$(PIP) -e '.[test,bench]'
	touch $@

# The real third-party ACP agents the subagent tests drive (tests skip without them; CI installs them).
# gemini-cli (node >= 20) adds about 100 MB and 7 s to a fresh install. claude-agent-acp declares node >= 22
# (every release does), so npm warns EBADENGINE under Node 20; 0.101.0 runs, and its tests pass, on Node 20.20.
# It brings the `claude` binary (about 320 MB of the 550 MB in .venv/npm; README.md, "Development").
CLAUDE_AGENT_ACP := @agentclientprotocol/claude-agent-acp@0.101.0
GEMINI_CLI := @google/gemini-cli@0.61.0
# The real MCP servers the MCP client tests drive over stdio (docs/mcp.md).
MCP_SERVERS := @modelcontextprotocol/server-everything@2026.8.31 @modelcontextprotocol/server-filesystem@2026.8.31
# The real ACP client that drives `dsh acp` in tests/e2e/test_acp_client_acpx.py and docs/editors.md's transcripts.
# acpx declares node >= 22.13 but runs on Debian's node 20 for everything dsh uses (exec, --agent, the
# permission flags, SIGINT as session/cancel: checked by those tests); 41 packages, 4-17 s to install (npm 10 or 11).
ACP_CLIENT := acpx@0.19.1
NPM_AGENTS := $(CLAUDE_AGENT_ACP) $(GEMINI_CLI) $(MCP_SERVERS) $(ACP_CLIENT)
# Each stamp's name carries a checksum of its pins: changing a pin reinstalls, nothing else does.
NPM_STAMP := $(VENV)/.npm-$(shell echo '$(NPM_AGENTS)' | cksum | cut -d' ' -f1)
$(NPM_STAMP): | $(BIN)/python
	npm install --no-audit --no-fund --prefix $(VENV)/npm $(NPM_AGENTS)
	touch $@
npm-agents: $(NPM_STAMP)

# The real LiteLLM proxy the gateway tests put between dsh and the fault server, in a venv of its own so
# its pins never meet dsh's (tests fail without it under CI=true). 1.108.7: the newest 1.108 patch whose
# pinned extras (litellm-enterprise, litellm-proxy-extras) the package registry has.
LITELLM := litellm[proxy]==1.108.7
LITELLM_STAMP := $(VENV)/.litellm-$(shell echo '$(LITELLM)' | cksum | cut -d' ' -f1)
$(LITELLM_STAMP): | $(BIN)/python
	$(PYTHON) -m venv $(VENV)/litellm
	$(VENV)/litellm/bin/python -m pip install -q --disable-pip-version-check '$(LITELLM)'
	touch $@
litellm: $(LITELLM_STAMP)

demo: $(VENV)/.demo
	$(BIN)/dsh --demo

test: $(VENV)/.test $(LITELLM_STAMP)
	@if command -v npm >/dev/null; then $(MAKE) --no-print-directory npm-agents; \
	else echo "npm not found: the real ACP agent tests skip (install Node.js and npm to run them)"; fi
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/python -m tests.house_rules
	$(MAKE) --no-print-directory typecheck
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PARALLEL) $(PYTEST_ARGS)

# The quick tier for the edit-and-test loop: lint and the unit tests (no pseudo-terminal, reliability,
# packaging, subagent-process or real-product runs, no transcript regeneration); `make test` runs everything.
check: lint
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PARALLEL) -m "not slow and not real_product" \
		--ignore=tests/e2e --ignore=tests/reliability --ignore=tests/packaging \
		--ignore=tests/agent_loop/subagent --ignore=tests/test_docs.py $(PYTEST_ARGS)

lint: $(VENV)/.test
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/python -m tests.house_rules
	$(MAKE) --no-print-directory typecheck

# mypy resolves the installed names (dsh.llm, ...) through links that give it the wheel's dsh/ layout.
$(VENV)/typecheck/dsh: | $(BIN)/python
	mkdir -p $@
	for layer in llm agent_loop repl; do ln -sfn $(CURDIR)/$$layer $@/$$layer; done

typecheck: $(VENV)/.test $(VENV)/typecheck/dsh
	MYPYPATH=$(VENV)/typecheck $(BIN)/mypy -p dsh.llm -p dsh.agent_loop -p dsh.repl

bench: $(VENV)/.bench
	$(BIN)/python -m bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
