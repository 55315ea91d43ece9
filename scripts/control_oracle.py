"""Can InstructNet steer the motion at all when it is shown it? SR-C's cases (eval/control.py: the same
held-out contexts, keys, replays and rule) continued with the real chunk's own video prompt: an oracle,
since the prompt is made from the very frames the chunk is scored against. If InstructNet follows a
motion-vector prompt, a prompt drawn from the keys is a route to control; if it does not follow even
that, its path into the base is what is weak, not the keys.

    OMP_NUM_THREADS=2 .venv/bin/python scripts/control_oracle.py --model M --instruct I --out OUT.json \
        [--contexts 2] [--kind flow] [--kind canny] STORE...
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from gamengen.curate.prompts import video_prompt
from gamengen.data.captions import key_request
from gamengen.data.store import Store
from gamengen.engine.clip import Steering, continue_clip
from gamengen.eval.control import (MOVING, ControlEvalConfig, _env, camera_label, chunk, contexts, direction_label, hold,
                                   key_buttons, replay)
from gamengen.models.clip_model import ClipModel
from gamengen.models.instruct_model import InstructModel


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, type=Path)
    ap.add_argument("--instruct", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--contexts", type=int, default=2)
    ap.add_argument("--kind", action="append", default=None, help="video prompt kinds (default: flow)")
    ap.add_argument("stores", nargs="+", type=Path)
    a = ap.parse_args()
    model = ClipModel.from_pretrained(a.model)
    instruct = InstructModel.from_pretrained(a.instruct, model)
    cfg = ControlEvalConfig(a.contexts)
    used, gen = chunk(model, cfg)
    rng = np.random.default_rng(cfg.seed)  # as eval-control draws its contexts
    kinds = a.kind or ["flow"]
    variants = [f"{k} prompt only" for k in kinds] + [f"{k} prompt, keys, instruction" for k in kinds]
    cases = []
    for path in a.stores:
        store = Store.open(path)
        spec = store.spec
        env = _env(spec)
        try:
            for c in contexts(model, store, cfg, rng, used, gen):
                for key in cfg.keys:
                    if key not in spec.action_set.names:
                        continue
                    _, diverged = replay(env, c.env_seed, c.actions, c.frames[-1])
                    real = hold(env, spec.action_set.names.index(key), gen, c.frames[-1])
                    whole = np.concatenate([c.frames, real[1:]])  # (F, H, W, 3): the clip the prompt is made from
                    row = {"game": spec.env_id, "key": key, "real": camera_label(real), "diverged": diverged,
                           "base": direction_label(c.base[used - 1:])}
                    for v in variants:
                        kind = v.split()[0]
                        with_keys = "keys" in v
                        steer = Steering(instruct, key_buttons(spec.action_set, key) if with_keys else (),
                                         key_request(key) if with_keys else None, video_prompt(kind, whole))
                        out = continue_clip(model, c.frames, c.prompt, cfg.seed, cfg.steps, cfg.guidance, steer=steer)
                        row[v] = direction_label(out[used - 1:])
                    cases.append(row)
                    print(json.dumps(row), flush=True)
        finally:
            env.close()
    scored = [r for r in cases if r["real"] in MOVING and not r["diverged"]]
    rates = {v: float(np.mean([r[v] == r["real"] for r in scored])) for v in ["base", *variants]}
    a.out.write_text(json.dumps({"scored": len(scored), "rates": rates, "cases": cases}, indent=1))
    print(json.dumps({"scored": len(scored), "rates": rates}))


if __name__ == "__main__":
    main()
