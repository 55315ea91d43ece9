#!/usr/bin/env bash
# Issue 19 on 2 CPU cores: InstructNet beside the clip model, and its control evaluation. Every stage
# is seeded and resumable: kill it and re-run the same command. The clip datasets are issue 18's
# (scripts/cpu-issue18.sh record, curate), curated by a gamengen that keeps the keys per frame.
#
#   scripts/cpu-issue19.sh heldout     # stores the InstructNet never sees: three games, other seeds,
#                                      # 1,500 random-play steps each, in data/heldout/<game>
#   scripts/cpu-issue19.sh control     # recordings for control: --policy control (a motion key held 4 or 8
#                                      # steps, then another) on the seven Freedoom maps (8,000 steps each)
#                                      # and two scenarios (4,000), stores in data/control-stores/<game>,
#                                      # curated into data/control/<game>
#   scripts/cpu-issue19.sh picture     # recordings of the picture events only (the six that recolour the
#                                      # view), one every 2-4 s in episodes of 10 s, on the seven Freedoom
#                                      # maps and my_way_home (5,000 random + 2,500 scripted steps each),
#                                      # stores in data/picture-stores/<game>, curated (every window, scenes
#                                      # from 2 s) into data/picture/<game>; every powerup is taken 1 s
#                                      # before each event (--event-clear 1), so each event fires on an
#                                      # untinted view
#   scripts/cpu-issue19.sh instruct    # InstructNet beside MODEL (default models/clip-doom) on every
#                                      # curated game, Canny and flow prompts, MINUTES (default 55), bf16;
#                                      # in runs/instruct19 (prompt latents are encoded once, ~4 min a game);
#                                      # INIT=DIR starts from an InstructNet beside the same MODEL
#                                      # (models/instructnet-doom), THREADS (default 1) its torch threads,
#                                      # FLAGS more train-instruct flags (e.g. "--event-share 0.5")
#   scripts/cpu-issue19.sh eval        # SR-C and SR-E of $RUN/model on data/heldout, CONTEXTS (default 4)
#                                      # per game, into $RUN-control; JUDGE=DIR (an earlier `clip eval`'s
#                                      # --out) adds SR-E for the summons its classifier knows; INSTRUCT=DIR
#                                      # measures another InstructNet (models/instructnet-doom), CG=W with
#                                      # --control-guidance W, THREADS (default 1) its torch threads
#
# GG (default .venv/bin/gamengen), MODEL, RUN (default runs/instruct19) and BF16 (0 or 1; default: 1 where
# /proc/cpuinfo shows avx512_bf16) may be set; DATA=control
# trains `instruct` on data/control instead of issue 18's data/curated, DATA="curated picture" on both.
set -euo pipefail
cd "$(dirname "$0")/.."
GG=${GG:-.venv/bin/gamengen}
MODEL=${MODEL:-models/clip-doom}
RUN=${RUN:-runs/instruct19}
HELDOUT=("freedoom1/E1M1 1011" "freedoom2/MAP01 1021" "scenario/my_way_home 1034")
CONTROL=("freedoom1/E1M1 2011 8000" "freedoom1/E1M2 2012 8000" "freedoom1/E1M3 2013 8000" "freedoom1/E1M4 2014 8000"
         "freedoom2/MAP01 2021 8000" "freedoom2/MAP02 2022 8000" "freedoom2/MAP03 2023 8000"
         "scenario/defend_the_center 2031 4000" "scenario/my_way_home 2034 4000")
PICTURE=("freedoom1/E1M1 5011" "freedoom1/E1M2 5012" "freedoom1/E1M3 5013" "freedoom1/E1M4 5014"
         "freedoom2/MAP01 5021" "freedoom2/MAP02 5022" "freedoom2/MAP03 5023" "scenario/my_way_home 5034")
PICTURE_EVENTS=light_amp,invulnerability,radiation_suit,berserk,lights_dim,lights_bright
data=(); for set in ${DATA:-curated}; do for d in data/$set/*/; do data+=(--data "$d"); done; done
# bf16 autocast only where the CPU has bf16 units: elsewhere it is emulated, ~10x slower than fp32.
if [ -z "${BF16:-}" ]; then grep -q avx512_bf16 /proc/cpuinfo && BF16=1 || BF16=0; fi
prec=""; [ "$BF16" = 1 ] && prec=--bf16
case "${1:?usage: scripts/cpu-issue19.sh heldout|control|picture|instruct|eval}" in
  heldout)
    for g in "${HELDOUT[@]}"; do
      read -r target seed <<<"$g"
      $GG record --env "vizdoom:$target" --frame-skip 2 --events --labels --max-episode-steps 1000 --workers 1 \
        --policy random --seed "$seed" --steps 1500 --out "data/heldout/${target//\//-}"
    done
    ;;
  control)
    for g in "${CONTROL[@]}"; do
      read -r target seed steps <<<"$g"
      name=${target//\//-}
      $GG record --env "vizdoom:$target" --frame-skip 2 --events --labels --max-episode-steps 1000 --workers 1 \
        --policy control --seed "$seed" --steps "$steps" --out "data/control-stores/$name"
      [ -f "data/control/$name/dataset.json" ] && continue  # curate writes its folder whole, so present = done
      $GG curate --from "data/control-stores/$name" --out "data/control/$name" --max-windows 6
    done
    ;;
  picture)
    for g in "${PICTURE[@]}"; do
      read -r target seed <<<"$g"
      name=${target//\//-}
      common=(--env "vizdoom:$target" --frame-skip 2 --labels --event-kinds "$PICTURE_EVENTS" --event-period 2,4
              --event-clear 1 --max-episode-steps 175 --workers 2 --out "data/picture-stores/$name")
      $GG record "${common[@]}" --policy random --seed "$seed" --steps 5000
      $GG record "${common[@]}" --policy scripted --seed "$((seed + 100))" --steps 2500
      [ -f "data/picture/$name/dataset.json" ] && continue  # curate writes its folder whole, so present = done
      $GG curate --from "data/picture-stores/$name" --out "data/picture/$name" --max-windows 0 --min-seconds 2
    done
    ;;
  instruct)
    OMP_NUM_THREADS=${THREADS:-1} $GG clip train-instruct --model "$MODEL" "${data[@]}" --out "$RUN" \
      --prompt-kind canny --prompt-kind flow --steps 100000 $prec --max-minutes "${MINUTES:-55}" \
      ${INIT:+--init "$INIT"} ${FLAGS:-}
    ;;
  eval)
    stores=(); for g in "${HELDOUT[@]}"; do read -r target _ <<<"$g"; stores+=(--data "data/heldout/${target//\//-}"); done
    OMP_NUM_THREADS=${THREADS:-1} $GG clip eval-control --model "$MODEL" --instruct "${INSTRUCT:-$RUN/model}" \
      "${stores[@]}" --out "$RUN-control" --contexts "${CONTEXTS:-4}" --control-guidance "${CG:-1}" \
      ${JUDGE:+--classifier "$JUDGE"}
    ;;
  *) echo "unknown stage $1 (heldout, control, picture, instruct or eval)" >&2; exit 2 ;;
esac
