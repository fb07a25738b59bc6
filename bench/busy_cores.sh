#!/usr/bin/env bash
# Run a command with every core busy beside it (one shell busy loop a core), as on a loaded machine, then print
# its exit status and wall time (docs/runs.md, "The suite on any CPU and a busy machine"):
#   bash bench/busy_cores.sh bash .ci/run
set -u
for _ in $(seq "$(nproc)"); do ( while :; do :; done ) & done
loops=$(jobs -p)
trap 'kill $loops 2>/dev/null' EXIT
start=$(date +%s)
"$@"
rc=$?
echo "busy_cores: rc=$rc in $(( $(date +%s) - start )) s beside $(nproc) busy loops"
exit $rc
