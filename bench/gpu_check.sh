#!/usr/bin/env bash
# The GPU check as one device call of at most 9 minutes (results/gpu_<card>.txt is its output, as printed):
#   0. the card and the stack: the pinned transformers, tokenizers and math-verify with everything they import
#      (carried in .whl), over the image's own torch and numpy; the versions it ran with, printed
#   1. the tiny pair's main job for 2 steps on the card in bf16, sampling from bf16 copies, fused AdamW
#   2. bench/bench_gpu.py: copy bandwidth and bf16 matmul rate; ms per decode step at batch 256 and contexts
#      128 / 512 / 1024 for each sampler and both architectures, K-cache dtype, attention kernels, a profiler top 10;
#      the sampler-vs-scorer gap; update tokens/s at micro-batch 2 / auto
#   3. bench/bench_small.py: one GRAFT step of the `small` preset's exact flags (bf16 copy, auto sizes, fused AdamW)
#      at its shapes but 256 new tokens (a 1024-token step took more than 305 s on an H200: results/gpu_h200.txt)
#   4. the same with --memory-gib 22: the allocator capped as on a "24 GB" card (L4, A10G: ~22 GiB usable)
# Prepare on the CPU machine with bench/prepare_gpu_check.sh, then run with carry [".whl", ".device"]:
#   bash bench/gpu_check.sh            (output in $OUT, or ./gpu_check_out)
#   DEVICE=cpu TOY=1 bash bench/gpu_check.sh    every stage at toy sizes on a CPU (tests/test_gpu_check.py runs it)
# Each stage has its own time-out (90 + 180 + 140 + 110 s on a card), so that a slow stage cannot take the later ones
# with it; every stage prints each phase as it finishes and writes its JSON after each section or step.
# LIMIT_SCALE=k multiplies every time-out by k: a CPU runs the TOY stages slower than a card runs the real ones
# (tests/test_gpu_check.py sets it, so that a slow or busy CPU still finishes each stage; the limits stay hang guards).
set -o pipefail
OUT=${OUT:-gpu_check_out}; mkdir -p "$OUT"
DEVICE=${DEVICE:-cuda}; TOY=${TOY:+--toy}
export PYTHONUNBUFFERED=1 GRAFT_MIN_CACHE=$PWD/.device/cache HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
SITE=${SITE:-/tmp/site}
rm -rf "$SITE" && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" .whl/*.whl || exit 1
export PYTHONPATH=$SITE
if ! python3 -c "import transformers, tokenizers, huggingface_hub, math_verify" 2> $OUT/import.err; then
  echo "the pinned stack does not import here ($(tail -1 $OUT/import.err)); using the image's own" | tee -a $OUT/gpu.txt
  unset PYTHONPATH
fi
clean() { tr '\r' '\n' | grep -v '%|\|^ *$\|Loading weights\|Writing model'; }
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi: $DEVICE"
  python3 -c "import sys, torch, transformers, tokenizers, huggingface_hub; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__, 'from', transformers.__file__.rsplit('/', 2)[0], 'tokenizers', tokenizers.__version__, 'huggingface_hub', huggingface_hub.__version__)"; } | tee -a $OUT/gpu.txt
LIMIT_SCALE=${LIMIT_SCALE:-1}
stage() { local limit=$(($1 * LIMIT_SCALE)) name=$2; shift 2; local t0=$SECONDS
  echo "## $name" | tee -a $OUT/gpu.txt
  timeout $limit "$@" 2>&1 | clean | tee $OUT/$name.txt | tail -60
  echo "## $name: rc=${PIPESTATUS[0]} in $((SECONDS - t0)) s (limit $limit s)" | tee -a $OUT/gpu.txt; }
TINY=(--steps 2 --out /tmp/tiny_check --dtype bfloat16 --bf16-sampler --fused-adamw)
[ -n "$TOY" ] && TINY+=(--prompts-per-step 16 --eval-problems 16)
SMALL=(--tokenizers .device/tok --train-data .device/gsm8k_256.jsonl --device $DEVICE --steps 1)
[ -z "$TOY" ] && SMALL+=(--max-new-tokens 256)
stage 90 tiny python3 graft_min.py --pair tiny --device $DEVICE "${TINY[@]}"
GPU=($TOY)  # at toy sizes on a CPU without continuous batching (~45 s a call on 2 cores; on a card it runs last)
[ -n "$TOY" ] && GPU+=(--samplers fp32+autocast,bf16,bf16+static)
stage 180 bench_gpu python3 bench/bench_gpu.py "${GPU[@]}" --device $DEVICE --tokenizers .device/tok --cache-dir .device/cache --json $OUT/bench_gpu.json
stage 140 bench_small python3 bench/bench_small.py $TOY "${SMALL[@]}" --json $OUT/bench_small.json
stage 110 bench_small_22gib python3 bench/bench_small.py $TOY "${SMALL[@]}" --memory-gib 22 --json $OUT/bench_small_22gib.json
