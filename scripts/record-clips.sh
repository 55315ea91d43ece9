#!/usr/bin/env bash
# Varied, captionable ViZDoom recordings for GameGen-X-style training (docs/captions.md): four
# Freedoom Phase 1 maps, three Phase 2 maps and four scenarios with binary buttons, each with
# in-game events every 5-10 s of game time and the objects in view logged (--events --labels), at
# frame skip 2. One store per game (a store holds one env); in each, a random-play shard and a
# scripted-explorer shard. Every command is seeded, so the data is the same on every machine, and
# resumable: kill it and run the same command again to continue.
#
#   scripts/record-clips.sh                 # everything (216k steps, ~1.7 GB; 5-15 min on 2 cores)
#   scripts/record-clips.sh freedoom1/E1M2  # one game only (a target below)
#   STEPS=2000 scripts/record-clips.sh scenario/health_gathering   # a small try
#
# Captions then come from the stores alone:
#   gamengen data caption data/clips/freedoom1-E1M1 --episode e000003 --start 140 --frames 140
#
# OUT (default data/clips), STEPS (random-play steps per game; the explorer records half as many),
# WORKERS (default 1: leaves a core free), SEED_OFFSET (default 0; added to every seed below, for other
# recordings of the same games) and GG (default .venv/bin/gamengen) may be set.
set -euo pipefail
cd "$(dirname "$0")/.."
GG=${GG:-.venv/bin/gamengen}
OUT=${OUT:-data/clips}
STEPS=${STEPS:-}
WORKERS=${WORKERS:-1}

# target, seed, random-play steps. Scenarios are single small rooms, so they get fewer steps.
# deadly_corridor is left out: random play dies there in ~2 s (Nightmare skill), under the 4 s
# GameGen-X keeps as its shortest clip (§3.2).
GAMES=(
  "freedoom1/E1M1 11 16000"
  "freedoom1/E1M2 12 16000"
  "freedoom1/E1M3 13 16000"
  "freedoom1/E1M4 14 16000"
  "freedoom2/MAP01 21 16000"
  "freedoom2/MAP02 22 16000"
  "freedoom2/MAP03 23 16000"
  "scenario/defend_the_center 31 8000"
  "scenario/defend_the_line 32 8000"
  "scenario/health_gathering 33 8000"
  "scenario/my_way_home 34 8000"
)

record_game() {
  local target=$1 seed=$(($2 + ${SEED_OFFSET:-0})) steps=${STEPS:-$3}
  local out="$OUT/${target//\//-}"
  local common=(--env "vizdoom:$target" --frame-skip 2 --events --labels --max-episode-steps 1000
                --workers "$WORKERS" --out "$out")
  "$GG" record "${common[@]}" --policy random --seed "$seed" --steps "$steps"
  "$GG" record "${common[@]}" --policy scripted --seed "$((seed + 100))" --steps "$((steps / 2))"
}

found=0
for game in "${GAMES[@]}"; do
  read -r target seed steps <<<"$game"
  if [ $# -eq 0 ] || [ "$1" = "$target" ]; then
    record_game "$target" "$seed" "$steps"
    found=1
  fi
done
if [ "$found" = 0 ]; then
  echo "unknown target '$1'; use one of: $(printf '%s ' "${GAMES[@]%% *}")" >&2
  exit 2
fi
