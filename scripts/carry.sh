#!/usr/bin/env bash
# Carry a long CPU run's newest checkpoint across sessions on fresh machines, through git.
#
#   scripts/carry.sh park runs/NAME      # newest whole checkpoint + the run's settings -> carry/NAME
#   scripts/carry.sh restore runs/NAME   # back into runs/NAME, only when it has no checkpoint yet
#
# runs/ stays out of git (datasets and runs are re-created by seeded commands), but a run of several
# single-core hours cannot be re-created each session. A parked checkpoint is the run's own format
# (safetensors + JSON with a sha256 manifest; train/checkpoint.py), so the same training command
# resumes from it exactly. Park only small runs: a folder under carry/ must stay under 50 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
op=${1:?usage: scripts/carry.sh park|restore runs/NAME}
run=${2:?usage: scripts/carry.sh park|restore runs/NAME}
run=${run%/}
dest=carry/$(basename "$run")
newest() { ls -d "$1"/checkpoints/step-* 2>/dev/null | sort | tail -1; }
case "$op" in
  park)
    ckpt=$(newest "$run")
    [ -n "$ckpt" ] || { echo "$run has no checkpoint to park; train it first" >&2; exit 2; }
    [ -f "$ckpt/manifest.json" ] || { echo "$ckpt has no manifest (a save was cut short); wait for the next one" >&2; exit 2; }
    tmp=$(mktemp -d carry/.tmp-XXXX)
    mkdir -p "$tmp/checkpoints"
    cp "$run"/*.json "$tmp/"
    cp -r "$ckpt" "$tmp/checkpoints/"
    size=$(du -sm "$tmp" | cut -f1)
    if [ "$size" -ge 50 ]; then rm -rf "$tmp"; echo "$ckpt is $size MB; carry/ holds folders under 50 MB" >&2; exit 2; fi
    rm -rf "$dest.old"; [ -d "$dest" ] && mv "$dest" "$dest.old"
    mv "$tmp" "$dest" && rm -rf "$dest.old"
    echo "parked $(basename "$ckpt") of $run in $dest ($size MB); commit it: git add $dest"
    ;;
  restore)
    [ -d "$dest/checkpoints" ] || exit 0  # nothing parked: a fresh run
    if [ -n "$(newest "$run")" ]; then exit 0; fi  # the run on this machine is newer or equal
    mkdir -p "$run/checkpoints"
    cp -n "$dest"/*.json "$run/"
    cp -r "$dest"/checkpoints/step-* "$run/checkpoints/"
    echo "restored $(basename "$(newest "$run")") of $run from $dest"
    ;;
  *) echo "unknown operation $op (park or restore)" >&2; exit 2 ;;
esac
