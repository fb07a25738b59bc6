#!/usr/bin/env bash
# Issue 26's GPU check as one command, for a CUDA machine without internet (results/gpu_h200.txt is its output):
# the tiny pair's main job for 2 steps on CUDA in bf16, then bench/bench_small.py at the small preset's shape.
# What travels with the working tree, prepared on a machine with the project's cache (`python pairs.py fetch`):
#   .whl/    math-verify 0.9.0, latex2sympy2_extended 1.11.0, antlr4-python3-runtime 4.13.2 (pip download --no-deps)
#   .device/tok/qwen, .device/tok/smollm2   tokenizer.json, tokenizer_config.json, chat_template.jinja of the
#            fetched Qwen2.5-Coder-0.5B-Instruct and SmolLM2-135M-Instruct (cache/real/...)
#   .device/cache/tiny                      the warm-started tiny pair (cache/tiny)
#   .device/gsm8k_256.jsonl                 the first 256 lines of cache/data/pypi/gsm8k_train.jsonl
# Output goes to $OUT (or ./gpu_check_out).
set -o pipefail
OUT=${OUT:-gpu_check_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GRAFT_MIN_CACHE=$PWD/.device/cache HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import sys, torch, transformers; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"; } | tee $OUT/gpu.txt
t0=$SECONDS
timeout 150 python3 graft_min.py --pair tiny --device cuda --dtype bfloat16 --steps 2 --out /tmp/tiny_cuda > $OUT/tiny_cuda.log 2>&1
echo "tiny main job rc=$? in $((SECONDS - t0)) s" | tee -a $OUT/gpu.txt
tr '\r' '\n' < $OUT/tiny_cuda.log | grep -v 'it/s\]\|s/it\]\|^$' | tail -25
t0=$SECONDS
timeout 380 python3 bench/bench_small.py --device cuda --steps 2 --tokenizers .device/tok --train-data .device/gsm8k_256.jsonl --json $OUT/bench_small.json 2>&1 | grep -v 'Loading weights\|Writing model' | tee $OUT/bench_small.txt
echo "bench rc=$? in $((SECONDS - t0)) s" | tee -a $OUT/gpu.txt
