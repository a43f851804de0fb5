#!/usr/bin/env bash
# One device call on the H200 (benchmarks/README.md): the GPU test tier, then the side-by-side benchmark.
# Run from the repo root there with `carry: [".whl"]`:  bash benchmarks/device.sh COMMIT [BUDGET_S] [ENGINES] [WORKLOADS]
# Writes gpu-tests.log, profile.json (benchmarks/profile_runtime.py), bench.log, the results JSON and PNG under $OUT.
# The GPU tests (GPU_TESTS=0 skips them) are capped at GPU_TESTS_S (150 s) and the profile at 150 s so the benchmark always runs;
# AGENT=1 runs the agent workload (benchmarks/agent.py, AGENT_S 400 s) instead of the profile and the harness; SERVE=1 runs the
# server under load instead (benchmarks/serve_bench.py: flidec serve and flide serve, 64 clients on mixed System One rows, capped at
# SERVE_S, default 300 s, setup included; writes serve.json, serve.log and each server's log); BUDGET_S (default 380)
# is the benchmark's whole budget, checkpoint and compiles included. PROFILE=0 skips the profile; E4=1 runs, instead of the
# profile and the harness, both flidec builds' distance from float32 beside flide's (E4_S, 300 s), then without flide on a second
# weight seed (E4_SEED_S, 150 s) and on the demo model's demo workload (E4_DEMO_S, 70 s). GEMM=1 runs, instead, benchmarks/gemm_library.py
# (cuBLAS beside the Triton GEMMs at GEMM_SIZES' shapes, capped at GEMM_S, 300 s) and the profile with --host-profile on HOST_WORKLOADS.
# The profile takes PROFILE_WORKLOADS, and HOST_PROFILE=1 adds its --host-profile; the harness runs on MODEL (default /tmp/qwen35-0.8b),
# made when missing at MAKE_SIZE (default 0.8B; e.g. MODEL=/tmp/qwen35-4b MAKE_SIZE=4B for the 4B row).
# DECISION=1 runs, instead, benchmarks/decision_oracle.py: flidec beside flide on the three decision layouts' 0.8B checkpoints
# (capped at DECISION_S, 420 s, checkpoints and compiles included; writes decision.json and decision.log). Use it with GPU_TESTS=0.
set -uo pipefail
COMMIT=${1:?usage: bash benchmarks/device.sh COMMIT [BUDGET_S] [ENGINES] [WORKLOADS]}
BUDGET=${2:-380}
ENGINES=${3:-flidec,flidec-solo,flide,flide-solo,hf,fp32-ref}
WORKLOADS=${4:-independent,race,mixed,lookahead,planner,quality}
OUT=${OUT:-/tmp/flidec-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --no-cache-dir --target /tmp/site . || echo "flidec did not install: the GPU tests will fail to import it"
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)" | tee -a "$OUT/gpu.txt"
[ "${GPU_TESTS:-1}" = 0 ] || timeout "${GPU_TESTS_S:-150}" python3 -P -m pytest -m gpu -q -p no:cacheprovider --durations=8 -s ${GPU_TEST_PATHS:-tests/codegen tests/runtime} 2>&1 | tee "$OUT/gpu-tests.log"
if [ "${AGENT:-0}" != 0 ]; then  # the agent workload (benchmarks/agent.py) instead of the profile and the harness
  timeout "${AGENT_S:-400}" python3 benchmarks/agent.py --model /tmp/qwen35-0.8b --variants "${AGENT_VARIANTS:-planner,systemone}" \
    --engines "${AGENT_ENGINES:-flidec,flide,flide-session}" --out "$OUT/agent.json" 2>&1 | tee "$OUT/agent.log"
  exit 0
fi
if [ "${SERVE:-0}" != 0 ]; then  # the server under load (benchmarks/serve_bench.py) instead of the profile and the harness
  SERVE_S=${SERVE_S:-300}
  timeout -k 45 "$SERVE_S" python3 benchmarks/serve_bench.py --model /tmp/qwen35-0.8b --commit "$COMMIT" \
    --time-budget-s "$((SERVE_S - 10))" --out "$OUT/serve.json" 2>&1 | tee "$OUT/serve.log"
  exit 0
fi
if [ "${DECISION:-0}" != 0 ]; then  # decision formats: flidec beside flide on the flide-template-v1 layouts
  DECISION_S=${DECISION_S:-420}
  timeout -k 30 "$DECISION_S" python3 benchmarks/decision_oracle.py --commit "$COMMIT" --time-budget-s "$((DECISION_S - 20))" \
    --out "$OUT/decision.json" 2>&1 | tee "$OUT/decision.log"
  exit 0
fi
if [ "${GEMM:-0}" != 0 ]; then  # issue 28's measurements: cuBLAS beside the Triton GEMMs, then the host's share of one request
  timeout "${GEMM_S:-300}" python3 benchmarks/gemm_library.py --sizes "${GEMM_SIZES:-0.8B,4B}" --out "$OUT/gemm-library.json" 2>&1 | tee "$OUT/gemm-library.log"
  timeout 150 python3 benchmarks/profile_runtime.py --model /tmp/qwen35-0.8b --workloads "${HOST_WORKLOADS:-race,mixed,quality}" --host-profile \
    --out "$OUT/host-profile.json" 2>&1 | tee "$OUT/host-profile.log"
  exit 0
fi
if [ "${E4:-0}" != 0 ]; then  # E4: both flidec builds beside flide from float32, on seed 0, a second seed, the demo model
  python3 benchmarks/run.py --model /tmp/qwen35-0.8b --engines "${E4_ENGINES:-fp32-ref,flidec,flidec-fp32,flide}" \
    --workloads quality,race,mixed --time-budget-s "${E4_S:-300}" --results-dir "$OUT/seed0" --commit "$COMMIT" --no-plot \
    2>&1 | tee "$OUT/seed0.log"
  python3 benchmarks/run.py --model /tmp/qwen35-0.8b-seed1 --make-seed 1 --engines "${E4_MORE:-fp32-ref,flidec,flidec-fp32}" \
    --workloads quality,race,mixed --time-budget-s "${E4_SEED_S:-150}" --results-dir "$OUT/seed1" --commit "$COMMIT" \
    --no-plot 2>&1 | tee "$OUT/seed1.log"
  DEMO=$(python3 -c "from flidec.models import DEMO_MODEL; print(DEMO_MODEL)")
  python3 benchmarks/run.py --model "$DEMO" --engines "${E4_MORE:-fp32-ref,flidec,flidec-fp32}" --workloads demo \
    --time-budget-s "${E4_DEMO_S:-70}" --results-dir "$OUT/demo" --commit "$COMMIT" --no-plot 2>&1 | tee "$OUT/demo.log"
  exit 0
fi
[ "${PROFILE:-1}" = 0 ] || timeout 150 python3 benchmarks/profile_runtime.py --model /tmp/qwen35-0.8b --workloads "${PROFILE_WORKLOADS:-quality,quality*4,race,race*8,mixed}" \
  ${HOST_PROFILE:+--host-profile} --out "$OUT/profile.json" 2>&1 | tee "$OUT/profile.log"
python3 benchmarks/run.py --model "${MODEL:-/tmp/qwen35-0.8b}" --make-size "${MAKE_SIZE:-0.8B}" --engines "$ENGINES" --workloads "$WORKLOADS" \
  --time-budget-s "$BUDGET" --results-dir "$OUT" --commit "$COMMIT" 2>&1 | tee "$OUT/bench.log"
