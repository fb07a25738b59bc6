#!/usr/bin/env bash
# Issue 37's GPU check as one device call of at most 7 minutes (results/gpu_<card>.txt is its output, as printed):
#   1. the card and the stack: the pinned transformers / tokenizers carried in .whl, over the image's own torch
#   2. the tiny pair's main job for 2 steps on CUDA in bf16 (sampling from the bf16 copies)
#   3. bench/bench_gpu.py: copy bandwidth and bf16 matmul rate; ms per decode step at batch 256 and contexts
#      128 / 512 / 1024 for each sampler and both architectures, K-cache dtype, attention kernels, a profiler top 10
#      before (fp32+autocast) and after (bf16 copy); the sampler-vs-scorer gap; update tokens/s at micro-batch 2 / auto
#   4. bench/bench_small.py: GRAFT steps at the small shape with the new defaults (bf16 copy, auto sizes):
#      phases, tokens/s, peak memory, hours for 100 steps with the preset's evaluations
#   5. the same, one step, with the process capped at 24 GiB (a 24 GB card): the auto sizes fit the cap
# Prepare on the CPU machine with bench/prepare_gpu_check.sh, then run with carry [".whl", ".device"]:
#   bash bench/gpu_check.sh            (output in $OUT, or ./gpu_check_out)
#   DEVICE=cpu TOY=1 bash bench/gpu_check.sh    every stage at the benches' toy sizes on a CPU, to try the call first
# Each stage has its own time-out (50 + 200 + 105 + 65 s = 7 min), so that a slow stage cannot take the later ones
# with it; inside bench_gpu the static-cache and continuous-batching samplers come last, the first to be cut.
set -o pipefail
OUT=${OUT:-gpu_check_out}; mkdir -p "$OUT"
DEVICE=${DEVICE:-cuda}; TOY=${TOY:+--toy}
export PYTHONUNBUFFERED=1 GRAFT_MIN_CACHE=$PWD/.device/cache HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
if ! python3 -c "import transformers" 2> $OUT/import.err; then  # the pinned stack does not import over this image
  echo "pinned transformers does not import here ($(tail -1 $OUT/import.err)); using the image's own" | tee -a $OUT/gpu.txt
  rm -rf /tmp/site/transformers* /tmp/site/huggingface_hub* /tmp/site/tokenizers*
fi
clean() { tr '\r' '\n' | grep -v '%|\|^ *$\|Loading weights\|Writing model'; }
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "no nvidia-smi: $DEVICE"
  python3 -c "import sys, torch, transformers, tokenizers; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__, 'tokenizers', tokenizers.__version__)"; } | tee -a $OUT/gpu.txt
stage() { local limit=$1 name=$2; shift 2; local t0=$SECONDS
  echo "## $name" | tee -a $OUT/gpu.txt
  timeout $limit "$@" 2>&1 | clean | tee $OUT/$name.txt | tail -60
  echo "## $name: rc=${PIPESTATUS[0]} in $((SECONDS - t0)) s (limit $limit s)" | tee -a $OUT/gpu.txt; }
stage 50 tiny_cuda python3 graft_min.py --pair tiny --device $DEVICE --dtype bfloat16 --steps 2 --out /tmp/tiny_cuda
stage 200 bench_gpu python3 bench/bench_gpu.py $TOY --device $DEVICE --tokenizers .device/tok --cache-dir .device/cache --json $OUT/bench_gpu.json
stage 105 bench_small python3 bench/bench_small.py $TOY --device $DEVICE --steps 2 --tokenizers .device/tok --train-data .device/gsm8k_256.jsonl --json $OUT/bench_small.json
stage 65 bench_small_24gib python3 bench/bench_small.py $TOY --device $DEVICE --steps 1 --memory-cap-gib 24 --tokenizers .device/tok --train-data .device/gsm8k_256.jsonl --json $OUT/bench_small_24gib.json
