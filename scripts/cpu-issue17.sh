#!/usr/bin/env bash
# Issue 17 on 2 CPU cores: the seeded data and the resumable long runs, one stage per call.
# Every stage can be killed and re-run with the same command to continue where it stopped
# (train-ae and train resume from their checkpoints; record skips the episodes it has).
#
#   scripts/cpu-issue17.sh data     # the training store and the two eval stores (seconds)
#   scripts/cpu-issue17.sh ae       # the long AE run: cpu-16ch on whole frames, the AE levers' winner (hours)
#   scripts/cpu-issue17.sh eval-ae  # its ceiling on the skip-2 eval store
#
# docs/results.md ("Autoencoder levers at equal CPU time") says why these settings. Runs the
# gamengen of .venv (make venv) unless GG says otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
GG=${GG:-.venv/bin/gamengen}
case "${1:?usage: scripts/cpu-issue17.sh data|ae|eval-ae}" in
  data)
    $GG record --env vizdoom:freedoom1/E1M1 --policy random --steps 100000 --workers 2 --frame-skip 2 --seed 3 --out data/train-k2
    $GG record --env vizdoom:freedoom1/E1M1 --policy random --steps 60000 --workers 2 --seed 7 --out data/eval-k1
    $GG record --env vizdoom:freedoom1/E1M1 --policy random --steps 30000 --workers 2 --frame-skip 2 --seed 7 --out data/eval-k2
    ;;
  ae)
    $GG train-ae --data data/train-k2 --out runs/ae-long --preset cpu-16ch --crop 0 \
      --steps 8000 --decoder-steps 2000 --checkpoint-every 100
    ;;
  eval-ae)
    $GG eval ae --ae runs/ae-long --data data/eval-k2 --out runs/ae-long-eval --samples 256
    ;;
  *) echo "unknown stage $1 (data, ae or eval-ae)" >&2; exit 2 ;;
esac
