"""How good a `gamengen clip eval` judge is on real clips, and what a longer or wider one would give.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/judge_sweep.py --model MODEL --judge DIR \
        [--steps N] [--width W] [--seed S] [--clips N] [--judge-data DIR]... DATA...

DIR holds a judge (an earlier eval's classifier/ folder) or is trained into here on `clip eval`'s
split (seed 0) with the ClassifierConfig defaults changed by --steps, --width, --clips (training clips per
game) and --seed (the judge's own initial weights and batches, not the split; the defaults: about 8
minutes of one core), with --judge-data's datasets added to its training clips (`clip eval --judge-data`). Either way it is then scored on every held-out real clip of DATA:
- held-out accuracy: the game of the whole 17-frame clip;
- real consistency: the game of the first 5 frames against that of the other 12, as `clip eval`
  splits a continuation, so the ceiling the judge puts on continuation consistency.
MODEL only names the clip model `clip eval` would be run on (its codec and frames; nothing is sampled).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import torch

from gamengen.eval.clip import CONTEXT_FRAMES, ClipEvalConfig, check_inputs, fit_classifier
from gamengen.eval.clip_classifier import META, ClassifierConfig

def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, type=Path)
    ap.add_argument("--judge", required=True, type=Path, help="a judge folder (trained here when empty)")
    ap.add_argument("--steps", type=int, help="ClassifierConfig.steps when training")
    ap.add_argument("--width", type=int, help="ClassifierConfig.width when training")
    ap.add_argument("--seed", type=int, help="ClassifierConfig.seed when training")
    ap.add_argument("--clips", type=int, help="ClassifierConfig.max_train_clips when training")
    ap.add_argument("--judge-data", type=Path, action="append", default=[],
                    help="a dataset for the judge's training only; repeat it")
    ap.add_argument("data", nargs="+", type=Path)
    a = ap.parse_args()
    changes = {k: v for k, v in (("steps", a.steps), ("width", a.width), ("seed", a.seed), ("max_train_clips", a.clips))
               if v is not None}
    cfg = ClipEvalConfig(classifier=ClassifierConfig(**changes))
    have = (a.judge / META).exists()
    unused = Path(tempfile.mkdtemp()) / "unused"
    inp = check_inputs(a.model, a.data, unused, cfg, a.judge if have else None, judge_data=[] if have else a.judge_data)
    clf = inp.classifier
    if clf is None:
        clf = fit_classifier(inp, cfg)
        clf.save(a.judge)
        print(f"trained the judge into {a.judge}")
    hits, agree, per_game = [], [], {}
    with torch.inference_mode():
        for k, game in enumerate(inp.games):
            mine = []
            for d, i in game.heldout:
                frames = inp.sets[d].frames(i)  # (F, H, W, 3) uint8
                mine.append(clf.predict(frames).game == k)
                agree.append(clf.predict(frames[:CONTEXT_FRAMES]).game == clf.predict(frames[CONTEXT_FRAMES:]).game)
            per_game[game.label] = round(float(np.mean(mine)), 3)
            hits += mine
    print(json.dumps({"judge": str(a.judge), "config": clf.config.__dict__, "final_loss": clf.loss,
                      "heldout_clips": len(hits), "accuracy": round(float(np.mean(hits)), 3),
                      "real_consistency": round(float(np.mean(agree)), 3), "per_game": per_game}, indent=1))


if __name__ == "__main__":
    main()
