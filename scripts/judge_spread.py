"""How much `gamengen clip eval`'s judge-based figures move with the judge alone: the same generated
clips scored by several judges trained alike (same split and settings, another --seed).

    OMP_NUM_THREADS=2 .venv/bin/python scripts/judge_spread.py --model MODEL --judge DIR --judge DIR ... \
        [--clips-per-game 8] [--instruct DIR] DATA...

Each DIR is a judge folder (an earlier eval's classifier/, or one `scripts/judge_sweep.py --seed S`
trained); all must have trained on the same clips, so that every one is scored on clips it never saw.
The clips are `clip eval`'s (seed 0: its prompts, seeds and held-out clips), made once; each judge
then scores them as `clip eval --classifier DIR` would, and one JSON line a judge is printed:
game accuracy of text-to-clip, of the codec and of real held-out clips, and continuation consistency
of the model's continuations and of the real clips.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from gamengen.eval.clip import ClipEvalConfig, check_inputs, make_clips, measure
from gamengen.eval.clip_classifier import ClipClassifier
from gamengen.models.clip_model import ClipModel


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, type=Path)
    ap.add_argument("--judge", required=True, type=Path, action="append", help="a judge folder; repeat it")
    ap.add_argument("--clips-per-game", type=int, default=8)
    ap.add_argument("--instruct", type=Path, help="InstructNet in the continuations, every control off")
    ap.add_argument("data", nargs="+", type=Path)
    a = ap.parse_args()
    cfg = ClipEvalConfig(clips_per_game=a.clips_per_game)
    unused = Path(tempfile.mkdtemp()) / "unused"
    inp = check_inputs(a.model, a.data, unused, cfg, a.judge[0], a.instruct)
    judges = [inp.classifier] + [ClipClassifier.load(j) for j in a.judge[1:]]
    split = {t["path"]: sorted(t["clips"]) for t in judges[0].trained_on}
    for j, clf in zip(a.judge[1:], judges[1:]):
        if {t["path"]: sorted(t["clips"]) for t in clf.trained_on} != split or clf.games != judges[0].games:
            raise SystemExit(f"{j} trained on other clips or games than {a.judge[0]}: its figures would not compare")
    model = ClipModel.from_pretrained(a.model)
    steer = None
    if a.instruct is not None:
        from gamengen.engine.clip import Steering
        from gamengen.models.instruct_model import InstructModel

        steer = Steering(InstructModel.from_pretrained(a.instruct, model))
    clips = make_clips(model, inp, judges[0].games, cfg, steer=steer)
    rows = []
    for j, clf in zip(a.judge, judges):
        r = measure(clf, inp, clips, cfg)
        g, c = r["game_accuracy"], r["continuation"]["consistency"]
        rows.append({"judge": str(j), "seed": clf.config.seed, "game_accuracy": g["text_to_clip"]["value"],
                     "codec": g["codec"]["value"], "real_heldout": g["real_heldout"]["value"],
                     "consistency": c["text_to_clip"]["value"], "real_consistency": c["real_heldout"]["value"],
                     "clips": g["text_to_clip"]["n"]})
        print(json.dumps(rows[-1]), flush=True)
    for k in ("game_accuracy", "consistency", "real_heldout", "real_consistency"):
        v = [r[k] for r in rows]
        print(f"{k}: mean {np.mean(v):.3f}, range [{min(v):.3f}, {max(v):.3f}] over {len(v)} judges")


if __name__ == "__main__":
    main()
