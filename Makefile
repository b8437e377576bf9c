# Set-up and checks. `make demo` and `make test` are the README's two set-up commands.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# System packages the tests need: a real OpenSSH server for `orch check`, shellcheck for the
# driver script.
APT_PACKAGES := openssh-server openssh-client shellcheck jq rsync

.PHONY: demo install test test-deps system-deps lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install --quiet -e .

demo: install
	$(BIN)/orch plan --model bert-large

system-deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi; \
		echo "installing:$$missing"; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

# torch first, pinned, so the CPU wheel is used (the `trace` extra must not pull a CUDA build).
TORCH_PIN ?= torch==2.13.0

test-deps: $(BIN)/python system-deps
	$(BIN)/pip install --quiet '$(TORCH_PIN)'
	$(BIN)/pip install --quiet -e '.[test,trace]'

# Two workers (each with its own moto server, sshd boxes and Terraform plugin cache), one test
# file per worker at a time so a file's module fixtures start once: 2,430 s in one process,
# 1,280-1,400 s in two on this 2-core machine (2026-12-06), as the end-to-end tests mostly wait
# on Terraform, moto and sshd. `make test TEST_WORKERS=0` runs in one process.
TEST_WORKERS ?= 2

test: test-deps
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

lint: $(BIN)/python
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: install
	$(BIN)/python benchmarks/startup.py
	$(BIN)/python benchmarks/throughput_accuracy.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
