#!/usr/bin/env bash
# Issue 17 on 2 CPU cores: the seeded data and the resumable long runs, one stage per call.
# Every stage can be killed and re-run with the same command to continue where it stopped
# (train-ae and train resume from their checkpoints; record skips the episodes it has).
#
#   scripts/cpu-issue17.sh data     # the training store and the two eval stores (seconds)
#   scripts/cpu-issue17.sh ae       # the long AE run: cpu-16ch on whole frames, the AE levers' winner (hours)
#   scripts/cpu-issue17.sh eval-ae  # its ceiling on the skip-2 eval store
#   scripts/cpu-issue17.sh wm LEVER  # a world model on that AE for MINUTES (default 60) minutes (equal
#                                    # time; a second call trains that long again). Two levers side by side,
#                                    # one core each: OMP_NUM_THREADS=1 MINUTES=40 scripts/cpu-issue17.sh wm A &
#                                    # (the same for B), as the AE levers were compared.
#   scripts/cpu-issue17.sh eval-wm LEVER   # the same eval for every lever, on the skip-2 eval store
#   scripts/cpu-issue17.sh distill LEVER   # a 1-step student of that world model, MINUTES (default 15) a call
#   scripts/cpu-issue17.sh eval-distill LEVER   # the same eval for the student
#
# GAME=dtc runs every stage on the smaller world of issue 17's scenario lever instead of E1M1:
# ViZDoom's defend_the_center (one round arena; turn left / right, fire), its own stores and runs
# (data/dtc-*, runs/ae-dtc, runs/wm-dtc-LEVER); its AE stage stops at MINUTES (default 40) per call.
#
# LEVER: base (cpu-m, context 16, the paper's uniform timesteps), lognormal (EDM's noise levels),
# ctx4 / ctx8 (context length), cpu (the smaller U-Net at context 16), unroll (a quarter of the
# contexts end in the model's own prediction), residual (diffuse the change from the last frame).
# One change each against base; combo joins the two winners at equal time (unroll + lognormal);
# large is combo on the cpu-l U-Net (1.5x the width), the size lever against combo; noise0.3 and
# noise0.1 are combo with less noise augmentation of the context (the paper's maximum level is 0.7).
#
# The long runs (ae, wm) first restore their checkpoint parked in carry/ when this machine has none,
# so a fresh machine resumes them; `scripts/carry.sh park runs/NAME` parks one before a session ends.
#
# Training runs under bf16 autocast where this CPU has bf16 units (1.4-1.5x the steps per second;
# slower elsewhere): BF16=1 or BF16=0 overrides. Precision may change when a run resumes.
#
# docs/results.md ("Autoencoder levers at equal CPU time") says why these settings. Runs the
# gamengen of .venv (make venv) unless GG says otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
GG=${GG:-.venv/bin/gamengen}
GAME=${GAME:-e1m1}
case "$GAME" in
  e1m1) env=vizdoom:freedoom1/E1M1; prefix=data/; long=runs/ae-long; game_tag="" ;;
  dtc) env=vizdoom:scenario/defend_the_center; prefix=data/dtc-; long=runs/ae-dtc; game_tag=-dtc ;;
  *) echo "unknown GAME $GAME (e1m1 or dtc)" >&2; exit 2 ;;
esac
train=${prefix}train-k2 evalk2=${prefix}eval-k2
if [ -z "${BF16:-}" ]; then grep -q avx512_bf16 /proc/cpuinfo && BF16=1 || BF16=0; fi
prec=""; [ "$BF16" = 1 ] && prec=--bf16
AE=${AE:-$long}  # the world-model stages' autoencoder; runs on another AE go to runs/wm-<its name>-LEVER
if [ "$AE" = "$long" ]; then tag=$game_tag; else tag="-$(basename "$AE")"; fi
case "${1:?usage: scripts/cpu-issue17.sh data|ae|eval-ae|wm LEVER|eval-wm LEVER|distill LEVER|eval-distill LEVER}" in
  data)
    if [ "$GAME" = dtc ]; then  # episodes end when the arena's monsters win: about 170 steps of random play
      $GG record --env $env --policy random --steps 60000 --workers 1 --frame-skip 2 --seed 3 --out $train
      $GG record --env $env --policy random --steps 10000 --workers 1 --frame-skip 2 --seed 7 --out $evalk2
      exit 0
    fi
    $GG record --env $env --policy random --steps 100000 --workers 2 --frame-skip 2 --seed 3 --out $train
    $GG record --env $env --policy random --steps 60000 --workers 2 --seed 7 --out data/eval-k1
    $GG record --env $env --policy random --steps 30000 --workers 2 --frame-skip 2 --seed 7 --out $evalk2
    ;;
  ae)
    scripts/carry.sh restore $long
    if [ "$GAME" = dtc ]; then  # a time budget: stage 1 ends at 3/4 of it, the decoder fine-tune at the end
      $GG train-ae --data $train --out $long --preset cpu-16ch --crop 0 --steps 1000000 \
        --decoder-steps 1000000 --max-minutes "${MINUTES:-40}" --checkpoint-every 100 $prec
    else
      $GG train-ae --data $train --out $long --preset cpu-16ch --crop 0 \
        --steps 8000 --decoder-steps 2000 --checkpoint-every 100 $prec
    fi
    ;;
  eval-ae)
    $GG eval ae --ae $long --data $evalk2 --out $long-eval --samples 256
    ;;
  wm|eval-wm|distill|eval-distill)
    lever=${2:?which lever: base, lognormal, ctx4, ctx8, cpu, unroll, residual, combo, large, noise0.3 or noise0.1}
    case "$lever" in
      base) flags="--preset cpu-m" ;;
      lognormal) flags="--preset cpu-m --timesteps lognormal" ;;
      ctx4) flags="--preset cpu-m --context 4" ;;
      ctx8) flags="--preset cpu-m --context 8" ;;
      cpu) flags="--preset cpu --context 16" ;;
      unroll) flags="--preset cpu-m --unroll 0.25" ;;
      residual) flags="--preset cpu-m --residual" ;;
      combo) flags="--preset cpu-m --unroll 0.25 --timesteps lognormal" ;;
      large) flags="--preset cpu-l --unroll 0.25 --timesteps lognormal" ;;
      noise0.3|noise0.1) flags="--preset cpu-m --unroll 0.25 --timesteps lognormal --max-noise-level ${lever#noise}" ;;
      *) echo "unknown lever $lever" >&2; exit 2 ;;
    esac
    case "$1" in
      wm)
        scripts/carry.sh restore "runs/wm$tag-$lever"
        $GG train --data $train --ae "$AE" --out "runs/wm$tag-$lever" $flags --steps 1000000 \
          --max-minutes "${MINUTES:-60}" --checkpoint-every 200 --sample-every 2000 $prec ;;
      distill)  # its 1-step student (paper App. A.4), for MINUTES (default 15) minutes a call
        $GG distill --model "runs/wm$tag-$lever/model" --data $train --latents "$AE/latents" \
          --out "runs/distill$tag-$lever" --steps 1000000 --max-minutes "${MINUTES:-15}" $prec ;;
      *)  # eval-wm, eval-distill: the same eval of the teacher or of its student
        run=wm; [ "$1" = eval-distill ] && run=distill
        $GG eval --model "runs/$run$tag-$lever/model" --data $evalk2 --out "runs/eval-$run$tag-$lever" --samples 64 \
          --episodes 8 --ar-steps 64 --long-steps 1000 --action-contexts 24 ;;
    esac
    ;;
  *) echo "unknown stage $1 (data, ae, eval-ae, wm, eval-wm, distill or eval-distill)" >&2; exit 2 ;;
esac
