#!/usr/bin/env bash
# Issue 17's GPU run: the world-model levers at equal GPU time on one GPU, in about 9 minutes.
#
#   scripts/gpu-train.sh OUT [full|smoke]      (END=<epoch seconds> to finish by then; default 9 min)
#   AE=<autoencoder folder> scripts/gpu-train.sh OUT one
#
# Records Freedoom E1M1 (random policy, frame skip 1 and 2), trains two autoencoders (8 and 16
# latent channels), five world models side by side on the one GPU for the same minutes (the cpu
# preset at context 64 and 16, the cpu-m preset, cpu-m at frame skip 2, cpu-m on the 16-channel AE),
# distills two of them to 1 step, and benches the paper preset (320x240, 4 DDIM steps + CFG).
# Every stage logs to OUT/log.txt; the model folders come back in OUT/models.tar.part-* with their
# weights in fp16 (each file under 16 MB). `smoke` runs the same stages at toy sizes in about a
# minute, to catch a broken stage before the real run. `one` trains the cpu-m preset alone on a given
# autoencoder with batches gathered on the GPU (--batched-data), for all the time left before END. Runs the `gamengen` on PYTHONPATH (or the
# installed one) under PY (default python3).
set -uo pipefail
OUT=$(realpath -m "${1:?usage: scripts/gpu-train.sh OUT [full|smoke]}")
SCALE=${2:-full}
W=${WORK:-/tmp/gamengen-gpu}/$SCALE
PY=${PY:-python3}
GG=${GG:-$PY -m gamengen}
rm -rf "$W"
mkdir -p "$OUT" "$W"
T0=$(date +%s)
log() { echo "[$(($(date +%s) - T0)) s] $*" | tee -a "$OUT/log.txt"; }

END=${END:-$((T0 + 540))}
if [ "$SCALE" = smoke ]; then
  FRAMES=1200; WORKERS=2; BENCH=tiny; STEPS=20; DSTEPS=3
elif [ "$SCALE" = one ]; then
  FRAMES=${FRAMES:-100000}; WORKERS=14; STEPS=1000000
else
  FRAMES=150000; WORKERS=7; BENCH=paper; STEPS=1000000; DSTEPS=100000
fi
minutes() {  # minutes RESERVE_S FRACTION MIN MAX: a stage's share of the time left before END
  [ "$SCALE" = smoke ] && { echo 0.1; return; }
  awk -v left=$((END - $(date +%s))) -v r="$1" -v f="$2" -v lo="$3" -v hi="$4" \
    'BEGIN { m = f * (left - r) / 60; if (m < lo) m = lo; if (m > hi) m = hi; printf "%.2f", m }'
}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-3}  # five trainers share the CPU cores that feed the GPU

run() {  # run NAME CMD...: one stage, its output in W/NAME.log, its exit status in the log
  local name=$1; shift
  if "$@" >"$W/$name.log" 2>&1; then log "ok $name"; else
    log "FAILED $name (exit $?): $(tail -3 "$W/$name.log" | tr '\n' ' ')"; echo "$name" >>"$W/failed"; fi
}

log "start $SCALE; $($PY -c 'import torch; print(torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu")')"

if [ "$SCALE" = one ]; then
  run record-k1 $GG record --env vizdoom:freedoom1/E1M1 --policy random --steps $FRAMES --workers $WORKERS \
    --seed 1 --out "$W/doom-k1"
  cp -r "${AE:?AE=<autoencoder folder> for one}" "$W/ae-cpu"
  WM_MIN=$(minutes 90 1 0.3 60); log "world model: $WM_MIN min"
  run wm-m-one $GG train --data "$W/doom-k1" --ae "$W/ae-cpu" --out "$W/wm-m-one" --preset cpu-m --batched-data \
    --batch-size 256 --steps $STEPS --max-minutes $WM_MIN --checkpoint-every 1000000 --sample-every 1000000
  mkdir -p "$W/bench"
  [ -d "$W/wm-m-one/model" ] && rm -rf "$W/ae-cpu"  # comes back inside the model folder
fi

# 1. Data: the paper's sticky random play, every frame (skip 1) and every second tic (skip 2).
[ "$SCALE" != one ] && {
for k in 1 2; do
  run record-k$k $GG record --env vizdoom:freedoom1/E1M1 --policy random --steps $FRAMES --workers $WORKERS \
    --frame-skip $k --seed $k --out "$W/doom-k$k" &
done
wait

# 2. Autoencoders on whole frames, same minutes: 8 latent channels (the cpu preset) and 16.
AE_MIN=$(minutes 0 0.2 0.5 1.5); log "autoencoders: $AE_MIN min"
for p in cpu cpu-16ch; do
  run ae-$p $GG train-ae --data "$W/doom-k1" --out "$W/ae-$p" --preset $p --crop 0 --batch-size 64 \
    --steps $STEPS --decoder-steps $DSTEPS --max-minutes $AE_MIN --checkpoint-every 1000000 &
done
wait

# 3. Latent caches, built once per (AE, store) before the trainers share them.
run cache-k1 $GG train --data "$W/doom-k1" --ae "$W/ae-cpu" --out "$W/cache-k1" --preset cpu-m --steps 0 &
run cache-k2 $GG train --data "$W/doom-k2" --ae "$W/ae-cpu" --out "$W/cache-k2" --preset cpu-m --steps 0 &
run cache-16 $GG train --data "$W/doom-k1" --ae "$W/ae-cpu-16ch" --out "$W/cache-16" --preset cpu-m --steps 0 &
wait

# 4. World models, side by side for the same minutes, batch 128 (130 s kept for steps 5 and 6).
WM_MIN=$(minutes 150 1 0.5 3.5); log "world models: $WM_MIN min"
wm() {  # wm NAME STORE AE ARGS...
  local name=$1 store=$2 ae=$3; shift 3
  run wm-$name $GG train --data "$W/$store" --ae "$W/$ae" --out "$W/wm-$name" --batch-size 128 --steps $STEPS \
    --max-minutes $WM_MIN --checkpoint-every 1000000 --sample-every 1000000 "$@"
}
wm cpu-ctx64 doom-k1 ae-cpu --preset cpu &
wm cpu-ctx16 doom-k1 ae-cpu --preset cpu --context 16 &
wm m doom-k1 ae-cpu --preset cpu-m &
wm m-skip2 doom-k2 ae-cpu --preset cpu-m &
wm m-16ch doom-k1 ae-cpu-16ch --preset cpu-m &
wait

# 5. 1-step students of the two cpu-m models on the 8-channel AE, and the paper preset's speed.
DISTILL_MIN=$(minutes 60 1 0.2 1.0); log "distillation: $DISTILL_MIN min"
for name in m m-skip2; do
  store=doom-k1; [ $name = m-skip2 ] && store=doom-k2
  run distill-$name $GG distill --model "$W/wm-$name/model" --data "$W/$store" --out "$W/distill-$name" \
    --latents "$W/ae-cpu/latents" --batch-size 64 --steps $STEPS --max-minutes $DISTILL_MIN \
    --checkpoint-every 1000000 &
done
mkdir -p "$W/bench"
run bench-$BENCH timeout 150 sh -c "$GG bench train --preset $BENCH --steps 5 --json > '$W/bench/$BENCH.json'" &
run bench-cpu-m timeout 150 sh -c "$GG bench train --preset cpu-m --steps 5 --json > '$W/bench/cpu-m.json'" &
wait
}

# 6. Pack: model folders with fp16 weights, run configs, losses and sample grids; logs.
$PY - "$W" "$OUT" <<'EOF'
import json, shutil, sys, tarfile
from pathlib import Path
import torch
from safetensors.torch import load_file, save_file
w, out = Path(sys.argv[1]), Path(sys.argv[2])
pack = w / "pack"
shutil.rmtree(pack, ignore_errors=True)
summary = {}
for run in sorted(list(w.glob("ae-*")) + list(w.glob("wm-*")) + list(w.glob("distill-*"))):
    model = run if run.name.startswith("ae-") else run / "model"
    if not (model / "config.json").exists():
        continue
    dest = pack / run.name
    # a world model's ae/ is a copy of its autoencoder run, which comes back once (ae-*)
    shutil.copytree(model, dest / "model", ignore=shutil.ignore_patterns("latents", "checkpoints",
                                                                         *(["ae"] if (w / "ae-cpu").exists() else [])))
    for f in (dest / "model").rglob("*.safetensors"):
        save_file({k: v.half() if v.is_floating_point() else v for k, v in load_file(f).items()}, f)
    for extra in ("config.json", "losses.json"):
        if (run / extra).exists():
            shutil.copy(run / extra, dest / extra)
    samples = sorted((run / "samples").glob("*.png"))
    if samples:
        shutil.copy(samples[-1], dest / samples[-1].name)
    if (run / "losses.json").exists():
        losses = json.loads((run / "losses.json").read_text())
        summary[run.name] = {"steps": len(losses), "loss_last_100": sum(losses[-100:]) / max(1, len(losses[-100:]))}
for log in w.glob("*.log"):
    (pack / "logs").mkdir(parents=True, exist_ok=True)
    shutil.copy(log, pack / "logs" / log.name)
(pack / "summary.json").write_text(json.dumps(summary, indent=2))
shutil.copytree(w / "bench", pack / "bench", dirs_exist_ok=True)
print(json.dumps(summary))
with tarfile.open(w / "models.tar", "w") as t:
    t.add(pack, arcname="gpu-run")
EOF
[ "$SCALE" != smoke ] && split -b 15m -d "$W/models.tar" "$OUT/models.tar.part-"
log "done; $(du -sh "$W/models.tar" | cut -f1) packed; failed: $(cat "$W/failed" 2>/dev/null | tr '\n' ' ')"
[ ! -s "$W/failed" ]  # the exit status: 0 when every stage passed
