"""One held-out context continued under each key and under event instructions, as one picture for
docs/gamegen_x.md ("Control"). Rows: the real game under each key (replayed to the context's frame,
as `clip eval-control` does) beside the clip model steered by InstructNet under the same key; then
the steered model under event instructions; last, the base without InstructNet. Each row starts at
the last context frame and shows every other frame.

    .venv/bin/python scripts/control_strips.py MODEL INSTRUCT STORE OUT.png [SEED]
"""

import sys

import numpy as np
from PIL import Image, ImageDraw

from gamengen.data.captions import event_request, key_request
from gamengen.data.store import Store
from gamengen.engine.clip import Steering, continue_clip
from gamengen.envs.vizdoom_env import DOOM_EVENTS
from gamengen.eval.control import (ControlEvalConfig, _env, chunk, contexts, hold,
                                   key_buttons, replay)
from gamengen.models.clip_model import ClipModel
from gamengen.models.instruct_model import InstructModel

KEYS = ("TURN_LEFT", "TURN_RIGHT", "FORWARD", "MOVE_FORWARD", "BACKWARD")
EVENTS = ("lights_dim", "radiation_suit", "berserk")


def main(model_dir, instruct_dir, store_dir, out, seed=0):
    model = ClipModel.from_pretrained(model_dir)
    net = InstructModel.from_pretrained(instruct_dir, model)
    cfg = ControlEvalConfig(contexts_per_game=1, seed=int(seed))
    used, gen = chunk(model, cfg)
    store = Store.open(store_dir)
    names = store.spec.action_set.names
    c = next(contexts(model, store, cfg, np.random.default_rng(int(seed)), used, gen))
    rows = []
    env = _env(store.spec)
    try:
        for key in (k for k in KEYS if k in names):
            replay(env, c.env_seed, c.actions, c.frames[-1])
            rows.append((f"real game, {key}", hold(env, names.index(key), gen, c.frames[-1])))
            steer = Steering(net, key_buttons(store.spec.action_set, key), key_request(key))
            rows.append((f"InstructNet, {key}", continue_clip(model, c.frames, c.prompt, cfg.seed, steer=steer)[used - 1:]))
    finally:
        env.close()
    events = {e.name: e for e in DOOM_EVENTS}
    for name in EVENTS:
        text = event_request(events[name])
        rows.append((f"InstructNet, {name}", continue_clip(model, c.frames, c.prompt, cfg.seed,
                                                           steer=Steering(net, (), text))[used - 1:]))
    rows.append(("base, no control", c.base[used - 1:]))
    label_w = 210
    H, W = rows[0][1].shape[1:3]
    picture = Image.new("RGB", (label_w + W * len(rows[0][1][::2]), H * len(rows)), (17, 17, 17))
    draw = ImageDraw.Draw(picture)
    for i, (label, frames) in enumerate(rows):
        picture.paste(Image.fromarray(np.concatenate(list(frames[::2]), axis=1)), (label_w, i * H))  # every other frame
        draw.text((6, i * H + H // 2 - 6), label, fill=(230, 230, 230))
    picture.save(out)
    print(f"{out}: {len(rows)} rows from {c.episode} frame {c.t} of {store_dir}")


if __name__ == "__main__":
    main(*sys.argv[1:])
