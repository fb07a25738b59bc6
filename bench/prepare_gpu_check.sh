#!/usr/bin/env bash
# Prepares what bench/gpu_check.sh needs on a GPU machine without internet, from this machine's cache
# (`python -m machinery.pairs fetch`, made here first if missing). Run it from the repository root; then give the device
# call carry [".whl", ".device"] (both git-ignored; ~50 MB together). The tiny pair needs nothing: it is shipped in
# tiny_pair/, which travels with the working tree.
#   .whl/    the pinned transformers, tokenizers, huggingface_hub and math-verify (the stack the tables were made
#            with) WITH everything they import (pip's resolution under requirements.txt's pins: safetensors and
#            regex at the versions transformers checks, huggingface_hub's httpx2, hf-xet, typer, ...), for
#            CPython $PYVER (default 3.12, the device image's); not torch and numpy, which the image brings
#   .device/tok/qwen, .device/tok/smollm2   tokenizer.json, tokenizer_config.json, chat_template.jinja of the
#            fetched Qwen2.5-Coder-0.5B-Instruct and SmolLM2-135M-Instruct (the small pair's vocabularies)
#   .device/gsm8k_256.jsonl                 the first 256 lines of the fetched GSM8K training split
set -euo pipefail
cd "$(dirname "$0")/.."
PYVER=${PYVER:-3.12}
CACHE=${GRAFT_MIN_CACHE:-cache}
python -c "from machinery import pairs, tasks; [pairs.ensure_model(s) for s in (pairs.QWEN_CODER, pairs.SMOLLM2)]; tasks.ensure_data()" \
  > /dev/null
rm -rf .whl .device && mkdir -p .whl .device/tok .device/cache
pip download -q --only-binary=:all: --python-version "$PYVER" -d .whl -c requirements.txt \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  transformers tokenizers huggingface_hub safetensors math-verify latex2sympy2_extended antlr4-python3-runtime \
  2>&1 | grep -v "^WARNING: Location" || true
ls .whl/transformers-*.whl > /dev/null  # the download above must have brought the closure
rm -f .whl/numpy-*.whl .whl/torch-*.whl  # the image's own: torch is built against its numpy
for pair in "qwen qwen2.5-coder-0.5b-instruct" "smollm2 smollm2-135m-instruct"; do
  set -- $pair
  mkdir -p .device/tok/$1
  cp $CACHE/real/$2/{tokenizer.json,tokenizer_config.json,chat_template.jinja} .device/tok/$1/
done
head -n 256 $CACHE/data/pypi/gsm8k_train.jsonl > .device/gsm8k_256.jsonl
du -sh .whl .device
