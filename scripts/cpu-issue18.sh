#!/usr/bin/env bash
# Issue 18 on 2 CPU cores: the GameGen-X clip model from recording to a trained model, one stage
# per call. Every stage is seeded and resumable: kill it and re-run the same command.
#
#   scripts/cpu-issue18.sh record     # the varied, captioned recordings (scripts/record-clips.sh, WORKERS=2)
#   scripts/cpu-issue18.sh curate     # one clip dataset per game: data/curated/<game>
#   scripts/cpu-issue18.sh judge-data # other recordings of the seven Freedoom maps (seeds + 1000, twice the
#                                     # steps), curated into data/judge/<game>: `clip eval --judge-data`'s
#                                     # clips, for a judge that has seen more of each map
#   scripts/cpu-issue18.sh text       # the caption T5, pretrained on every curated game's captions
#   scripts/cpu-issue18.sh ae-lever L # one 2D AE candidate on every game's frames, 20 single-core minutes:
#                                     # L = scratch (cpu preset), init (cpu, from the bundled model's AE),
#                                     # 16ch (cpu-16ch from scratch); scored by `ae-eval runs/ae18-L`
#   scripts/cpu-issue18.sh ae-eval DIR  # an AE's ceiling on each game's held-out frames (DIR-eval/<game>)
#   scripts/cpu-issue18.sh ae         # the 2D AE of every game: cpu-16ch on whole frames (issue 17's winner),
#                                     # started from the bundled defend_the_center AE, MINUTES (default 25), bf16
#   scripts/cpu-issue18.sh ae-long    # the same AE trained to the end (8,000 + 2,000 steps, several single-core
#                                     # hours) from the bundled clip model's AE, in runs/ae-games-long; runs until
#                                     # killed or done: before a session ends, kill it and `scripts/carry.sh park
#                                     # runs/ae-games-long`; this stage restores the parked checkpoint first
#   scripts/cpu-issue18.sh vae        # the video VAE over it, on every game (AE may name another:
#                                     # AE=runs/ae-games-long for the long one), in runs/vvae, MINUTES per call
#   scripts/cpu-issue18.sh train      # the cpu clip model on every curated game (MINUTES per call)
#   scripts/cpu-issue18.sh lever L    # one clip-model candidate for MINUTES (default 25) of one core, bf16:
#                                     # L = paper (cross-attention only), pooled (--pooled-text),
#                                     # short (--captions short, the paper's caption ablation, on the
#                                     # pooled model), images (--image-share 0.5 on the pooled model);
#                                     # in runs/clip18-L, scored by `eval runs/clip18-L`
#   scripts/cpu-issue18.sh clip-long  # the images lever on CODEC (2 threads, MINUTES per call, default 60),
#                                     # trained across sessions in legs: a leg starts from the last leg's
#                                     # model parked in carry/clip-long (--init: a fresh optimizer; seed = its
#                                     # steps, so no leg repeats another's batches), in runs/clip-long-from-S;
#                                     # from step 6,538 on, a leg exports its weights' moving average (clip
#                                     # train's default --ema-decay); scripts/clip_last_weights.py gives the last
#   scripts/cpu-issue18.sh clip-park  # the newest leg's model -> carry/clip-long (commit it: git add carry/clip-long)
#   scripts/cpu-issue18.sh leg NAME [FLAGS]  # an A/B leg of clip-long: STEPS (default 800) steps of one thread
#                                     # from the parked model with extra clip-train FLAGS (e.g. --context-noise
#                                     # 0.4), the last weights exported, in runs/leg-NAME; every leg draws the
#                                     # same batches (seed = the parked steps), so two legs differ by FLAGS only
#   scripts/cpu-issue18.sh eval RUN   # `clip eval` of RUN/model on every game into OUT (default RUN-eval), CLIPS
#                                     # (default 4) prompts per game; JUDGE=EVAL_DIR reuses an earlier eval's
#                                     # judge; CHAIN=K chains K more continuations, CN=S shows contexts at S
#
# GG (default .venv/bin/gamengen), AE and MINUTES (each stage has its default) may be set; CODEC and TEXT
# (default runs/vvae/model, runs/clip-text) name the codec and caption T5 the clip models train on:
# CODEC=models/clip-doom/codec TEXT=models/clip-doom/text are the bundled model's own copies of them.
# The stages marked bf16 use it where the CPU has bf16 units (BF16=0 or 1 overrides; default: 1 where
# /proc/cpuinfo shows avx512_bf16).
set -euo pipefail
cd "$(dirname "$0")/.."
GG=${GG:-.venv/bin/gamengen}
AE=${AE:-runs/ae-games}
CODEC=${CODEC:-runs/vvae/model}
TEXT=${TEXT:-runs/clip-text}
stores=(); for d in data/clips/*/; do stores+=(--data "$d"); done
data=(); for d in data/curated/*/; do data+=(--data "$d"); done
# bf16 autocast only where the CPU has bf16 units: elsewhere it is emulated, ~10x slower than fp32.
if [ -z "${BF16:-}" ]; then grep -q avx512_bf16 /proc/cpuinfo && BF16=1 || BF16=0; fi
prec=""; [ "$BF16" = 1 ] && prec=--bf16

parked_leg() {  # sets from and leg: clip train's flags to start from the parked model (or from scratch)
  if [ -f carry/clip-long/gamengen_clip.json ]; then
    from=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["meta"]["train_steps"])' \
      carry/clip-long/gamengen_clip.json)
    local init=runs/clip-long-init-$from  # the parked model, with the bundled text encoder it was parked without
    if [ ! -d "$init" ]; then
      rm -rf "$init.tmp" && cp -r carry/clip-long "$init.tmp"
      [ -d "$init.tmp/text" ] || cp -r models/clip-doom/text "$init.tmp/text"
      mv "$init.tmp" "$init"
    fi
    leg=(--init "$init" --seed "$from")
  else
    from=0; leg=(--codec "$CODEC" --text "$TEXT")
  fi
}

linked_cache() {  # every leg reads one latent and text cache (keyed by codec, text encoder and data):
  # encoding 5,193 clips takes about half an hour, once per machine
  mkdir -p runs/clip-long-cache "$1"
  [ -e "$1/cache" ] || ln -s ../clip-long-cache "$1/cache"
}
case "${1:?usage: scripts/cpu-issue18.sh record|curate|judge-data|text|ae-lever L|ae-eval DIR|ae|ae-long|vae|train|lever L|clip-long|clip-park|leg NAME|eval RUN}" in
  record) WORKERS=${WORKERS:-2} scripts/record-clips.sh ;;  # the docs' figures are of the two-worker data
  curate)
    for store in data/clips/*/; do
      name=$(basename "$store")
      [ -f "data/curated/$name/dataset.json" ] && continue  # curate writes its folder whole, so present = done
      $GG curate --from "$store" --out "data/curated/$name" --max-windows 6
    done
    ;;
  judge-data)
    for map in freedoom1/E1M1 freedoom1/E1M2 freedoom1/E1M3 freedoom1/E1M4 freedoom2/MAP01 freedoom2/MAP02 freedoom2/MAP03; do
      name=${map//\//-}
      OUT=data/judge-clips SEED_OFFSET=1000 STEPS=32000 WORKERS=${WORKERS:-2} scripts/record-clips.sh "$map"
      [ -f "data/judge/$name/dataset.json" ] || $GG curate --from "data/judge-clips/$name" --out "data/judge/$name" --max-windows 6
    done
    ;;
  text)
    [ -f runs/clip-text/gamengen_text.json ] || $GG clip train-text "${data[@]}" --out runs/clip-text --preset cpu --steps 600
    ;;
  ae-lever)
    case "${2:?which candidate: scratch, init or 16ch}" in
      scratch) flags="--preset cpu" ;;
      init) flags="--preset cpu --init models/freedoom-e1m1/ae" ;;
      16ch) flags="--preset cpu-16ch" ;;
      *) echo "unknown candidate $2" >&2; exit 2 ;;
    esac
    $GG train-ae "${stores[@]}" --out "runs/ae18-$2" $flags --steps 1000000 --decoder-steps 1000000 \
      --checkpoint-every 100 --max-minutes 20
    ;;
  ae-eval)
    dir=${2:?which autoencoder folder}
    for d in data/clips/*/; do
      $GG eval ae --ae "$dir" --data "$d" --out "${dir%/}-eval/$(basename "$d")" --samples 64 >/dev/null
    done
    ;;
  ae)
    OMP_NUM_THREADS=1 $GG train-ae "${stores[@]}" --out "$AE" --preset cpu-16ch --init models/defend-the-center/ae \
      --steps 1000000 --decoder-steps 1000000 --checkpoint-every 200 --max-minutes "${MINUTES:-25}" $prec
    ;;
  ae-long)  # no --max-minutes: with it, stage 1 would end at 3/4 of one call's budget (a time-budget run)
    scripts/carry.sh restore runs/ae-games-long
    OMP_NUM_THREADS=${THREADS:-1} $GG train-ae "${stores[@]}" --out runs/ae-games-long --preset cpu-16ch \
      --init models/clip-doom/codec/ae --steps 8000 --decoder-steps 2000 --checkpoint-every 100 $prec
    ;;
  vae)  # resumable; before a session ends, `scripts/carry.sh park runs/vvae` (this stage restores it)
    scripts/carry.sh restore runs/vvae
    OMP_NUM_THREADS=${THREADS:-1} $GG clip train-vae "${stores[@]}" --ae "$AE" --out runs/vvae --steps 3000 \
      --max-minutes "${MINUTES:-60}"
    ;;
  train)
    $GG clip train "${data[@]}" --codec "$CODEC" --text "$TEXT" --out runs/clip --preset cpu --steps 100000 \
      --max-minutes "${MINUTES:-60}"
    ;;
  lever)
    case "${2:?which candidate: paper, pooled, short or images}" in
      paper) flags="" ;;
      pooled) flags="--pooled-text" ;;
      short) flags="--pooled-text --captions short" ;;
      images) flags="--pooled-text --image-share 0.5" ;;
      *) echo "unknown candidate $2" >&2; exit 2 ;;
    esac
    OMP_NUM_THREADS=1 $GG clip train "${data[@]}" --codec "$CODEC" --text "$TEXT" --out "runs/clip18-$2" \
      --preset cpu --steps 100000 $prec $flags --max-minutes "${MINUTES:-25}"
    ;;
  clip-long)
    parked_leg
    out=runs/clip-long-from-$from
    linked_cache "$out"
    OMP_NUM_THREADS=${THREADS:-2} $GG clip train "${data[@]}" "${leg[@]}" --out "$out" \
      --preset cpu --steps 100000 $prec --pooled-text --image-share 0.5 --max-minutes "${MINUTES:-60}"
    ;;
  leg)
    name=${2:?which leg: a name for runs/leg-NAME}
    parked_leg
    linked_cache "runs/leg-$name"
    OMP_NUM_THREADS=${THREADS:-1} $GG clip train "${data[@]}" "${leg[@]}" --out "runs/leg-$name" \
      --preset cpu --steps "${STEPS:-800}" $prec --pooled-text --image-share 0.5 --ema-decay 0 "${@:3}"
    ;;
  clip-park)  # a leg writes its model when its MINUTES are up (or at --steps), not when killed
    run=$(ls -d runs/clip-long-from-*/model 2>/dev/null | sort -t- -k4 -n | tail -1)
    [ -n "$run" ] || { echo "no leg of clip-long has written its model yet; run clip-long first" >&2; exit 2; }
    rm -rf carry/.tmp-clip-long && cp -r "$run" carry/.tmp-clip-long
    # the text encoder is the bundled model's (TEXT=models/clip-doom/text): left out, to stay under 50 MB
    same=$(.venv/bin/python -c 'import sys; from gamengen.models.text_encoder import CaptionEncoder as C
from gamengen.train.clip_data import text_key as k; print(k(C.load(sys.argv[1])) == k(C.load(sys.argv[2])))' \
      "$run/text" models/clip-doom/text)
    if [ "$same" = True ]; then rm -rf carry/.tmp-clip-long/text; fi
    rm -rf carry/clip-long.old; [ -d carry/clip-long ] && mv carry/clip-long carry/clip-long.old
    mv carry/.tmp-clip-long carry/clip-long && rm -rf carry/clip-long.old
    echo "parked $run in carry/clip-long ($(du -sm carry/clip-long | cut -f1) MB); commit it: git add carry/clip-long"
    ;;
  eval)
    run=${2:?which clip run folder}
    OMP_NUM_THREADS=1 $GG clip eval --model "$run/model" "${data[@]}" --out "${OUT:-${run%/}-eval}" \
      --clips-per-game "${CLIPS:-4}" ${JUDGE:+--classifier "$JUDGE"} ${CHAIN:+--chain "$CHAIN"} \
      ${CN:+--context-noise "$CN"}
    ;;
  *) echo "unknown stage $1 (record, curate, judge-data, text, ae-lever, ae-eval, ae, ae-long, vae, train, lever, clip-long, clip-park, leg or eval)" >&2; exit 2 ;;
esac
