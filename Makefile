# lorasent: `make run` sets up a pinned environment if missing, then runs the pipeline.
# Targets document themselves: `make help`.

# No "Entering directory" lines, even when called from another make: `make exp-show
# EXP_SHOW_ARGS=--csv > runs.csv` must write the CSV alone.
MAKEFLAGS += --no-print-directory

PYTHON ?= python3
VENV ?= .venv
ifeq ($(LORASENT_SYSTEM_PYTHON),1)
# In the containers (docker/): the image's Python already holds everything.
BIN := $(patsubst %/,%,$(dir $(shell command -v $(PYTHON))))
STAMP :=
else
BIN := $(VENV)/bin
STAMP := $(VENV)/.lorasent-installed
endif
# torch is installed apart from the lock: the CPU build here (pip takes it from local
# disk), a CUDA build from PyPI elsewhere; for ROCm pass the wheel index, e.g.
# make run TORCH_INDEX_URL=https://download.pytorch.org/whl/rocm6.4
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX_URL ?=
# Passed to `python -m venv`, e.g. --system-site-packages to reuse an image's torch.
VENV_FLAGS ?=
PYTEST_ARGS ?=
export PATH := $(abspath $(BIN)):$(PATH)

.DEFAULT_GOAL := help
.PHONY: help setup run reproduce smoke test test-fast test-integration test-e2e test-container test-cluster test-containers bench device-check exp exp-show metrics seeds sweep queue-trial compare browser sshd lint lock lock-check \
	doctor clean \
	docker-build docker-run docker-build-cpu docker-run-cpu

help:  ## Show the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-17s %s\n", $$1, $$2}'

# torch first (unless the venv sees one), then the lock with --no-deps so that nothing
# it holds can pull in another torch build.
$(VENV)/.lorasent-installed: pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install \
		$(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL)) "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --no-deps --require-hashes -r requirements.lock
	$(BIN)/python -m pip install --no-deps -e .
	touch $@

setup: $(STAMP)  ## Create .venv with pinned dependencies (skipped when up to date)

# CONFIG=configs/<preset>.yaml merges that preset into params.yaml first (see configs/).
CONFIG ?=
# With a default DVC remote (docs/sharing.md), `dvc repro --pull` takes every unchanged
# stage's outputs from it instead of running the stage: a clone of a pushed run trains
# nothing. Without one, --pull would fail, so it is left out. lorasent.run_pipeline runs DVC's
# own `dvc repro [--pull]`, says once what DVC's "Unable to pull data" warnings mean (an
# empty remote: the stages run here), and ends with what to commit (and push). Then the
# reproduction verdict against HEAD's committed run (`lorasent reproduce --workspace`:
# identical, equivalent, consistent or different), or why the run is not one of HEAD (a
# preset's params, uncommitted code); it never changes make's exit status.
run: $(STAMP)  ## Set up if needed, then run the pipeline (dvc repro; --pull with a DVC remote) and judge it against HEAD's run; CONFIG=configs/x.yaml applies a preset first
	$(if $(CONFIG),$(BIN)/lorasent preset $(CONFIG))
	if $(BIN)/dvc remote default >/dev/null 2>&1; then $(BIN)/python -m lorasent.run_pipeline --pull; \
	else $(BIN)/python -m lorasent.run_pipeline; fi
	$(BIN)/lorasent reproduce --after-run

# REV (default HEAD) rerun in a temporary clone and judged against what it committed;
# REPRODUCE_ARGS=--no-train re-scores its adapter only, --workspace judges the outputs here.
REV ?= HEAD
REPRODUCE_ARGS ?=
reproduce: $(STAMP)  ## Rerun REV (default HEAD) in a temporary clone and judge it: identical, equivalent, consistent or different (REPRODUCE_ARGS=--no-train)
	$(BIN)/lorasent reproduce $(REV) $(REPRODUCE_ARGS)

# A first run of all five stages in about two minutes on 2 cores: a tiny split, 4 steps.
# It changes params.yaml (and, once run, dvc.lock and metrics/), and says so.
smoke: $(STAMP)  ## A 2-minute run of all five stages on a tiny split (configs/smoke.yaml); changes params.yaml
	$(BIN)/lorasent preset configs/smoke.yaml
	$(BIN)/dvc repro
	@echo "smoke: params.yaml, dvc.lock, metrics/ and the DVC outputs (models/adapter, data/split)" \
		"now hold the smoke run (ignore DVC's git add hint above); back to the committed run:" \
		"git checkout params.yaml dvc.lock metrics, then make run (or $(BIN)/dvc checkout" \
		"where make run has built the committed outputs before)"

# The tiers (pyproject.toml's markers, tests/conftest.py): fast, then integration, then
# end to end; make stops at the first tier that fails. PYTEST_ARGS goes to each.
FAST := -m "not integration and not slow and not container and not cluster"
INTEGRATION := -m "integration and not slow"
# Prerequisites run in the order given (no -j), and make stops at the first that fails:
# the fast tier, then the integration tier. Then the end-to-end tier runs beside the
# container and cluster tiers (the end-to-end tests wait on dvc and git half the time,
# the container tiers mostly on the disk and the Docker engine), each side's output
# printed whole when it ends (--output-sync); make waits for both and fails if either
# fails. `browser` comes first (and `sshd`) so that its apt-get never runs beside the
# container tier's.
test: test-fast test-integration browser sshd  ## Set up if needed, then the fast and integration tiers (stopping at the first that fails), then the end-to-end tier beside the container and cluster tiers
	$(MAKE) -j2 --output-sync=target test-e2e test-containers

# Two pytest processes, each test file in one of them (its module fixtures built once):
# 1,231 tests take 77 s so against 104 s in one process on 2 idle cores (issue 50's
# round; most of a test's time is Python's imports and the tiny Gemma, not a core's).
FAST_PROCESSES ?= 2
test-fast: $(STAMP)  ## The fast tier: pure tests and mechanics on a tiny random Gemma (90 s budget)
	$(BIN)/python -m pytest $(FAST) -n $(FAST_PROCESSES) --dist loadfile $(PYTEST_ARGS)

test-integration: $(STAMP)  ## The integration tier: the stages in-process on the packaged models
	$(BIN)/python -m pytest $(INTEGRATION) $(PYTEST_ARGS)

# The end-to-end tests spend about half their time waiting (on dvc, its queue workers,
# git): two pytest processes, each test file in one of them, so that a module's fixtures
# (a clone, its experiments) are built once; each process builds its own tiny run.
E2E_PROCESSES ?= 2
# Without this make's MAKEFLAGS: under `make test`'s -j2 it names a jobserver that the
# `make` a test runs cannot reach ("jobserver unavailable" on its first line).
NO_MAKEFLAGS := env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL
test-e2e: $(STAMP) browser sshd  ## The end-to-end tier: dvc, make and Chromium in subprocesses on a tiny repo
	$(NO_MAKEFLAGS) $(BIN)/python -m pytest -m slow -n $(E2E_PROCESSES) --dist loadfile $(PYTEST_ARGS)

# Builds docker/cpu/Dockerfile (and docker/rocm/Dockerfile against a stand-in base) in a
# Docker engine, starting one on paths of its own per run (and installing Debian's
# docker.io) when none answers; removes only what it made, by id, so that two run at
# once; skips when it cannot, fails instead under CI=true (tests/container_tier.py).
test-container: $(STAMP)  ## The container tier: the images built, checked and run; the run's bytes against the venv's
	$(NO_MAKEFLAGS) $(BIN)/python -m pytest -m container $(PYTEST_ARGS)

# Two containers of the CPU image as two machines on the host's network (loopback
# addresses only): a Ray sweep across them, one lost mid-sweep, two-machine training,
# the git and DVC remotes over SSH and S3 served from this host (tests/test_cluster.py).
# Alone it builds the image first; `make test` runs it after the container tier in one
# pytest process (test-containers), on that tier's engine and image.
test-cluster: $(STAMP) sshd  ## The cluster tier: two containers as two machines (Ray sweep, a machine lost, two-machine training, SSH and S3 remotes)
	$(NO_MAKEFLAGS) $(BIN)/python -m pytest -m cluster $(PYTEST_ARGS)

test-containers: $(STAMP) sshd  ## The container tier, then the cluster tier on its engine and image (one pytest process)
	$(NO_MAKEFLAGS) $(BIN)/python -m pytest -m "container or cluster" $(PYTEST_ARGS)

# The report test opens report.html in headless Chromium. Debian's package; as root or
# through sudo. CHROMIUM=/path/to/chrome uses another build instead. Looked up again when
# empty: `make test`'s own make, after `browser` installed it, inherits an empty one.
ifeq ($(strip $(CHROMIUM)),)
CHROMIUM := $(firstword $(shell command -v chromium chromium-browser google-chrome 2>/dev/null))
endif
export CHROMIUM
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
browser:  ## Install Chromium from Debian's apt if no Chromium or Chrome is on PATH
	@$(if $(CHROMIUM),echo "browser: $(CHROMIUM)",$(SUDO) apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends chromium)

# The SSH remote test (tests/test_cloud_remotes.py) starts an sshd of its own on 127.0.0.1,
# with its own config, keys and authorized_keys. Debian's openssh-server when no sshd is
# found (as root or through sudo; on a machine with systemd, Debian also starts its ssh
# service on port 22, which the test never uses), and sshd's privilege separation folder
# /run/sshd, which that service makes when it starts and a container never starts it.
SSHD := $(firstword $(shell command -v sshd /usr/sbin/sshd 2>/dev/null))
sshd:  ## Install Debian's openssh-server if no sshd is found (the SSH remote test and the cluster tier run their own)
	@$(if $(SSHD),echo "sshd: $(SSHD)",$(SUDO) apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends openssh-server)
	@test -d /run/sshd || $(SUDO) install -d -m 0755 /run/sshd

BENCH_ARGS ?=
bench: $(STAMP)  ## Measure train and eval speed against the seeds' ways; writes bench/results.{json,md}
	$(BIN)/python -m lorasent.tools.bench $(BENCH_ARGS)

# Once on every machine lent a GPU (NVIDIA or ROCm), its results committed: doctor, the
# bench on the GPU, and the small pipeline on the GPU against the CPU (docs/rocm.md).
# E.g. make device-check DEVICE_CHECK_ARGS="--peak-tflops 989"
DEVICE_CHECK_ARGS ?=
device-check: $(STAMP)  ## GPU check: doctor, bench on the GPU, pipeline GPU vs CPU; writes bench/results-gpu.{json,md}
	$(BIN)/python -m lorasent.tools.device_check $(DEVICE_CHECK_ARGS)

# `dvc exp show` narrowed to what a sweep is read by: accuracy, macro-F1 and the relative
# error reduction with their 95% intervals, each class's F1, the mean training loss, and
# the params that differ; the split's row and class counts, the queue's state and
# eval.json's copies of the baselines, labels, warnings and notes are dropped. DVC matches
# these regexes at the start of each column name. The recipe is not echoed, so
# `make exp-show EXP_SHOW_ARGS=--csv > runs.csv` writes a CSV and nothing else.
EXP_SHOW_ARGS ?=
exp-show: $(STAMP)  ## dvc exp show: headline metrics with intervals, per-class F1, ECE, each test set's accuracy, swept params
	@$(BIN)/dvc exp show --only-changed \
		--drop '.*(confusion_matrix|zero_shot|\.precision|\.recall|\.support)|(src|data|models|metrics)/|rows_read|rows_kept|dropped\.|split_rows\.|class_counts\.|overlap\.|intervals\.|baseline\.|majority_(class|accuracy)|mode|reference|relative_error_reduction_note|test_rows|labels|warnings|grad_norm|learning_rate|total_flos|epoch|step|loss|train\.(runtime|.*_per_second)|calibration\.|label_issues\.|test_sets\.|strongest_supervised|verdict|cost\.|Created|State|Executor|validation_rows|scores_are|note' \
		--keep '(metrics/eval\.json:)?((accuracy|macro_f1|relative_error_reduction)(_ci95_(low|high))?|per_class\..+\.f1)$$|metrics/validation\.json:(accuracy|macro_f1)$$|calibration\.(scaled\.)?ece$$|test_sets\.[^.]+\.accuracy$$|train\.loss$$' \
		$(EXP_SHOW_ARGS)

metrics: $(STAMP)  ## The headline of metrics/eval.json with 95% intervals, per-class F1, baselines, warnings
	@$(BIN)/lorasent metrics

# The current params (and SET's changes) over N seeds, queued as DVC experiments named
# <NAME>-seed<S>; waits, then prints accuracy and macro-F1 as mean ± sd.
N ?= 3
NAME ?=
SET ?=
JOBS ?= 1
# One experiment, the documented way (README): `dvc exp run` with SET's settings. DVC writes
# them into params.yaml before any stage reads them, and removes the outputs of the stages
# it reruns; when a stage rejects a value, params.yaml and those outputs are put back as
# they were, so nothing leaks into the next experiment (LORASENT_MAKE_EXP tells the stage's
# params error so, instead of the way back it gives a bare `dvc exp run -S`).
exp: $(STAMP)  ## One experiment (SET="train.lora.r=16" NAME=r16); a rejected value changes nothing
	@test -n "$(SET)" || { echo 'make exp: give SET="key=value ...", e.g. SET="train.lora.r=16"' >&2; exit 2; }
	@cp params.yaml .params.yaml.before-exp
	@LORASENT_MAKE_EXP=1 $(BIN)/dvc exp run $(if $(NAME),-n $(NAME)) $(foreach s,$(SET),-S $(s)) || { \
		mv .params.yaml.before-exp params.yaml; $(BIN)/dvc checkout -q; \
		echo "make exp: the experiment failed (above); params.yaml and the outputs are back as they were before it" >&2; \
		exit 1; }
	@rm -f .params.yaml.before-exp

seeds: $(STAMP)  ## Run over N seeds (N=3 NAME=seeds SET="train.lora.r=16" JOBS=1): mean ± sd
	$(BIN)/lorasent seeds -n $(N) --name $(or $(NAME),seeds) -j $(JOBS) $(foreach s,$(SET),-S $(s))

# A grid (SET's settings, several values each: "train.lora.r=4,8 train.learning_rate=1e-4,2e-4")
# times SEEDS seeds as Ray tasks, one GPU or CPUS_PER_RUN CPUs per run, each a DVC
# experiment <NAME>-<key><value>...-seed<S>; ADDRESS=auto joins the Ray cluster that
# `ray start --head` started, GIT_REMOTE=origin the git remote the other machines clone
# from (docs/scale-out.md).
SEEDS ?= 3
ADDRESS ?=
CPUS_PER_RUN ?=
GIT_REMOTE ?=
sweep: $(STAMP)  ## Grid x seeds on Ray, a GPU per run (SET="train.lora.r=4,8" SEEDS=3 NAME=sweep): mean ± sd, verdicts
	$(BIN)/lorasent sweep --seeds $(SEEDS) --name $(or $(NAME),sweep) $(foreach s,$(SET),-S $(s)) \
		$(if $(ADDRESS),--address $(ADDRESS)) $(if $(CPUS_PER_RUN),--cpus-per-run $(CPUS_PER_RUN)) \
		$(if $(GIT_REMOTE),--git-remote $(GIT_REMOTE))

# Does `lorasent queue` beat random picks? After `make run`: POOL texts of the fetched data
# outside the split; at each of SEEDS seeds, BUDGET picked by the queue (RANDOM_SHARE of
# them at random; empty: the queue's 20%) and BUDGET at random, each arm added to the
# training split as a DVC experiment <NAME>-queued-seed<S> / <NAME>-random-seed<S>, then
# the two groups compared over seeds on every test set (docs/active-learning.md). Leaves
# the last queued arm's run in the workspace.
POOL ?= 3000
BUDGET ?= 200
RANDOM_SHARE ?=
queue-trial: $(STAMP)  ## Queue vs random picks over seeds (POOL=3000 BUDGET=200 SEEDS=3 NAME=qt): verdict per test set
	$(BIN)/python -m lorasent.tools.queue_trial --pool $(POOL) --budget $(BUDGET) --seeds $(SEEDS) \
		--name $(or $(NAME),qt) $(if $(RANDOM_SHARE),--random-share $(RANDOM_SHARE))

# A and B: commits, branches, tags or experiment names; B may be `workspace`.
A ?= HEAD
B ?= workspace
OUT ?=
compare: $(STAMP)  ## Is B better than A? Verdict, intervals, per-class, plots: A=<rev> B=<rev> [OUT=dir]
	$(BIN)/lorasent compare '$(A)' '$(B)' $(if $(OUT),--out $(OUT))

# mypy reads its settings, and the files to check (src/ and tests/), from pyproject.toml.
lint: $(STAMP)  ## Lint and type-check the code (ruff, mypy) and both Dockerfiles (hadolint)
	$(BIN)/ruff check src tests
	$(BIN)/mypy
	$(BIN)/hadolint docker/rocm/Dockerfile docker/cpu/Dockerfile

doctor: $(STAMP)  ## Report torch, the GPU and the libraries; check params.yaml's needs
	$(BIN)/lorasent doctor

lock:  ## Re-resolve requirements.lock (with hashes, without torch); needs the package index
	rm -rf build/lockvenv && $(PYTHON) -m venv build/lockvenv
	build/lockvenv/bin/python -m pip install -q "$(TORCH_SPEC)"
	build/lockvenv/bin/python -m pip install -q -e '.[dev,ssh,s3]'
	build/lockvenv/bin/python -m pip freeze --exclude-editable \
		| grep -v -E '^torch==' > build/pins.txt
	build/lockvenv/bin/python -m pip install -q uv
	{ sed -n '/^#/p' requirements.lock; build/lockvenv/bin/uv pip compile build/pins.txt \
		--no-deps --generate-hashes --no-header --no-annotate -q; } > requirements.lock.new
	mv requirements.lock.new requirements.lock && rm -rf build/lockvenv

lock-check:  ## Install requirements.lock with --no-deps into a throwaway venv
	rm -rf build/lockcheck && $(PYTHON) -m venv build/lockcheck
	build/lockcheck/bin/python -m pip install -q --no-deps --require-hashes -r requirements.lock
	rm -rf build/lockcheck

IMAGE ?= lorasent:rocm
CPU_IMAGE ?= lorasent:cpu
HF_CACHE ?= $(HOME)/.cache/huggingface
# As the calling user, so that outputs in the repo stay yours; the host's Hugging Face
# cache read-only when it exists; HSA_OVERRIDE_GFX_VERSION only when you set it.
# DOCKER_ARGS adds docker options (several machines: --network host --ipc host);
# DOCKER_CMD replaces the command run in the container.
DOCKER_ARGS ?=
DOCKER_CMD ?= make run
# A DVC remote's credentials, passed by name only: docker copies each one that is set
# from this environment, so no value is written to a command line, a file or a layer.
# The remote itself is in .dvc/config or .dvc/config.local, inside the mounted repo.
REMOTE_ENV ?= AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_DEFAULT_REGION \
	AWS_ENDPOINT_URL AZURE_STORAGE_ACCOUNT AZURE_STORAGE_KEY AZURE_STORAGE_CONNECTION_STRING \
	AZURE_STORAGE_SAS_TOKEN GOOGLE_CLOUD_PROJECT
# DOCKER_USER: uid:gid the container runs as (default: yours). The image has no passwd
# entry for it: USER names it for what asks (DVC's getpass.getuser(), which otherwise
# fails with "getpwuid(): uid not found"). LORASENT_IMAGE_ID tells the stages'
# provenance which image ran them (lorasent.environment.container_report).
DOCKER_USER ?= $$(id -u):$$(id -g)
DOCKER_RUN = docker run --rm --user "$(DOCKER_USER)" -e HOME=/tmp -e USER="$$(id -un)" \
	--shm-size=16g -v "$(CURDIR)":/work -w /work $(foreach v,$(REMOTE_ENV),-e $(v)) \
	$(if $(wildcard $(HF_CACHE)),-v "$(HF_CACHE)":/tmp/.cache/huggingface:ro) $(DOCKER_ARGS) \
	-e LORASENT_IMAGE_ID="$$(docker image inspect --format '{{.Id}}' $(1))" $(1)
# The bases, as the Dockerfiles' FROM lines name them (tests/test_container.py checks).
ROCM_BASE := rocm/pytorch:rocm7.0_ubuntu24.04_py3.12_pytorch_release_2.8.0
CPU_BASE := python:3.11.7-slim-bookworm
# DOCKER_BUILD_ARGS adds docker build options (e.g. --build-arg TORCH_INDEX_URL=...).
# The image is labelled with the commit built and the base's digest (pulled first, as
# docker build would; a base made here has no digest).
DOCKER_BUILD_ARGS ?=
DOCKER_BUILD = docker image inspect $(1) >/dev/null 2>&1 || docker pull $(1); \
	docker build -f $(2) -t $(3) --build-arg VCS_REF="$$(git rev-parse HEAD)$$(git diff \
	--quiet HEAD -- 2>/dev/null || echo -dirty)" --build-arg BASE_DIGEST="$$(docker image \
	inspect --format '{{join .RepoDigests " "}}' $(1))" $(DOCKER_BUILD_ARGS) .

docker-build:  ## Build the ROCm image (docker/rocm/Dockerfile)
	$(call DOCKER_BUILD,$(ROCM_BASE),docker/rocm/Dockerfile,$(IMAGE))

docker-run:  ## Run `make run` (or DOCKER_CMD) in the ROCm image on this machine's AMD GPUs
	$(call DOCKER_RUN,$(IMAGE)) --device=/dev/kfd --device=/dev/dri --group-add video \
		--security-opt seccomp=unconfined \
		$(if $(HSA_OVERRIDE_GFX_VERSION),-e HSA_OVERRIDE_GFX_VERSION=$(HSA_OVERRIDE_GFX_VERSION)) \
		$(DOCKER_CMD)

docker-build-cpu:  ## Build the CPU image (docker/cpu/Dockerfile)
	$(call DOCKER_BUILD,$(CPU_BASE),docker/cpu/Dockerfile,$(CPU_IMAGE))

docker-run-cpu:  ## Run `make run` in the CPU image
	$(call DOCKER_RUN,$(CPU_IMAGE)) $(DOCKER_CMD)

clean:  ## Remove the environment and DVC's outputs (data/, models/); keeps the DVC cache
	rm -rf $(VENV) data/raw data/split models/base models/adapter
