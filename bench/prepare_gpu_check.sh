#!/usr/bin/env bash
# Prepares what bench/gpu_check.sh needs on a GPU machine without internet, from this machine's cache
# (`python pairs.py fetch` and the tiny pair's warm-start, both made here first if missing). Run it from the
# repository root; then give the device call carry [".whl", ".device"] (both git-ignored; ~30 MB together).
#   .whl/    the pinned transformers, tokenizers and huggingface_hub (the stack the tables were made with) and
#            math-verify with its parser (pip download --no-deps; the device image has its own torch)
#   .device/tok/qwen, .device/tok/smollm2   tokenizer.json, tokenizer_config.json, chat_template.jinja of the
#            fetched Qwen2.5-Coder-0.5B-Instruct and SmolLM2-135M-Instruct (the small pair's vocabularies)
#   .device/cache/tiny                      the warm-started tiny pair
#   .device/gsm8k_256.jsonl                 the first 256 lines of the fetched GSM8K training split
set -euo pipefail
cd "$(dirname "$0")/.."
python -c "import pairs, settings, tasks; settings.model_paths(settings.parse_args(['--pair', 'tiny'])); \
[pairs.ensure_model(s) for s in (pairs.QWEN_CODER, pairs.SMOLLM2)]; tasks.ensure_data()" > /dev/null
rm -rf .whl .device && mkdir -p .whl .device/tok .device/cache
pin() { grep -i "^$1==" requirements.txt | cut -d' ' -f1; }
pip download -q --no-deps --only-binary=:all: --platform manylinux2014_x86_64 --python-version 3.12 -d .whl \
  "$(pin transformers)" "$(pin tokenizers)" "$(pin huggingface_hub)" "$(pin math-verify)" \
  "$(pin latex2sympy2_extended)" "$(pin antlr4-python3-runtime)"
for pair in "qwen qwen2.5-coder-0.5b-instruct" "smollm2 smollm2-135m-instruct"; do
  set -- $pair
  mkdir -p .device/tok/$1
  cp cache/real/$2/{tokenizer.json,tokenizer_config.json,chat_template.jinja} .device/tok/$1/
done
cp -r cache/tiny .device/cache/tiny
head -n 256 cache/data/pypi/gsm8k_train.jsonl > .device/gsm8k_256.jsonl
du -sh .whl .device
