#!/usr/bin/env bash
# Issue 18 on 2 CPU cores: the GameGen-X clip model from recording to a trained model, one stage
# per call. Every stage is seeded and resumable: kill it and re-run the same command.
#
#   scripts/cpu-issue18.sh record     # the varied, captioned recordings (scripts/record-clips.sh)
#   scripts/cpu-issue18.sh curate     # one clip dataset per game: data/curated/<game>
#   scripts/cpu-issue18.sh text       # the caption T5, pretrained on every curated game's captions
#   scripts/cpu-issue18.sh vae        # the video VAE over the 2D AE (AE, default runs/ae/cpu-16ch-whole)
#   scripts/cpu-issue18.sh train      # the cpu clip model on every curated game (MINUTES per call)
#
# GG (default .venv/bin/gamengen), AE and MINUTES (default 60) may be set.
set -euo pipefail
cd "$(dirname "$0")/.."
GG=${GG:-.venv/bin/gamengen}
AE=${AE:-runs/ae/cpu-16ch-whole}
case "${1:?usage: scripts/cpu-issue18.sh record|curate|text|vae|train}" in
  record) scripts/record-clips.sh ;;
  curate)
    for store in data/clips/*/; do
      name=$(basename "$store")
      [ -f "data/curated/$name/dataset.json" ] && continue  # curate writes its folder whole, so present = done
      $GG curate --from "$store" --out "data/curated/$name" --max-windows 6
    done
    ;;
  text)
    data=(); for d in data/curated/*/; do data+=(--data "$d"); done
    [ -f runs/clip-text/gamengen_text.json ] || $GG clip train-text "${data[@]}" --out runs/clip-text --preset cpu --steps 600
    ;;
  vae)
    $GG clip train-vae --data data/clips/freedoom1-E1M2 --ae "$AE" --out runs/vvae --steps 3000 \
      --max-minutes "${MINUTES:-60}"
    ;;
  train)
    data=(); for d in data/curated/*/; do data+=(--data "$d"); done
    $GG clip train "${data[@]}" --codec runs/vvae/model --text runs/clip-text --out runs/clip --preset cpu --steps 100000 \
      --max-minutes "${MINUTES:-60}"
    ;;
  *) echo "unknown stage $1 (record, curate, text, vae or train)" >&2; exit 2 ;;
esac
