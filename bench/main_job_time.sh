#!/usr/bin/env bash
# The main job's time, commit against commit on one machine: `python graft_min.py --pair tiny` as a fresh clone of
# each commit runs it (its own empty cache, so a commit that warm-starts its pair pays for it), the commits in turn
# (A B C A B C ...), ROUNDS rounds. Run it from the repository root with nothing else heavy on the cores:
#   bash bench/main_job_time.sh [ROUNDS] [COMMIT ...]      (default: 2 rounds of 46950e6 31b74a0 HEAD)
# For each run it appends one line to $OUT (default results/main_job_time.txt): the commit, the round, the whole
# wall time and peak memory (/usr/bin/time), and the runs' own `wall s` (the table's last column: RL steps and
# evaluations, no start-up, warm-start or start evaluation). Each run's printout goes to $LOGS/<commit>_<round>.log.
# 46950e6 is the commit whose README first said 3 min 29 s, 31b74a0 the one that said 6 min 42 s (issue 48).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-2}
shift || true
if [ $# -gt 0 ]; then COMMITS=("$@"); else COMMITS=(46950e6 31b74a0 HEAD); fi
COMMITS=($(for c in "${COMMITS[@]}"; do git rev-parse --short "$c"; done))
OUT=${OUT:-results/main_job_time.txt}
FLAGS=${FLAGS:-}  # more flags for every run (a quick check of this script: FLAGS="--steps 1 --eval-problems 4")
LOGS=${LOGS:-logs/main_job_time}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$LOGS" && LOGS=$(cd "$LOGS" && pwd)
PY=$(command -v python)
for c in "${COMMITS[@]}"; do  # each commit's tree as a fresh clone has it (tiny_pair/ included where it ships)
  mkdir -p "$WORK/$c" && git archive "$c" | tar -x -C "$WORK/$c"
done
{
  echo "# bash bench/main_job_time.sh $ROUNDS ${COMMITS[*]}${FLAGS:+   FLAGS=$FLAGS}   ($(date -u +%F), $(grep -m1 'model name' /proc/cpuinfo |
    cut -d: -f2 | xargs), $(nproc) cores, $("$PY" -c 'import torch, transformers as t; print("torch", torch.__version__,
    "transformers", t.__version__)'))"
  printf "%-8s %5s %8s %8s %14s\n" commit round "wall s" "peak GB" "runs' wall s"
} >> "$OUT"
for r in $(seq 1 "$ROUNDS"); do
  for c in "${COMMITS[@]}"; do
    log="$LOGS/${c}_$r.log"
    rm -rf "$WORK/$c/runs" "$WORK/$c/cache"
    (cd "$WORK/$c" && /usr/bin/time -f "TIME %e %M" "$PY" graft_min.py --pair tiny --out runs/main \
      --cache-dir "$WORK/$c/cache" $FLAGS > "$log" 2>&1)
    read -r _ wall kb < <(grep '^TIME ' "$log" | tail -1)
    runs=$(awk '$2 == "grpo" || $2 == "graft" { if ($NF ~ /^[0-9]+$/) s = s " " $NF } END { print s }' "$log")
    printf "%-8s %5s %8.1f %8.2f %14s\n" "$c" "$r" "$wall" "$(echo "$kb / 1048576" | bc -l)" "${runs# }" >> "$OUT"
    tail -1 "$OUT"
  done
done
