"""`gamengen clip control-use`: does an InstructNet read its controls, or only add capacity?

SR-C and SR-E (eval/control.py) say whether steering works, in about 25 minutes. This says why not,
in about a minute: the stage-2 flow loss (§3.5, continuation, the GEN caption given) on the clips the
InstructNet trained on, under the same draws (clip, context length, t, noise), with

- own: each clip's own keys and instruction caption (keys where the clip recorded them);
- shuffled: another clip's (the batch rolled by one), so a control that carries what the clip does
  costs loss here;
- none: no control at all;
- keys only / instruction only: one of the two, own or shuffled;
- with ``prompts``, per video prompt kind: that prompt alone, own or shuffled. A prompt of motion
  vectors shows the very motion the chunk should have, so it is the strongest control InstructNet has:
  if it does not read that one either, its path into the base, not the keys, is what is weak;
- base: the frozen clip model alone.

``event_share`` draws that share of the clips from those with an in-game event, the context ending
before its effect shows (as `train-instruct --event-share`): there the instruction's Trans and Light
fields say what the frames to generate do, so ``shuffled - own`` on them asks whether events are read.
``gen_text=False`` drops the GEN caption, as `train-instruct --text-dropout` does: the GEN caption
describes the whole clip, frames to generate included, so where it is given it can say what the
controls say.

``shuffled - own`` is what the controls carry; ``base - none`` is what InstructNet adds as extra
capacity for continuation, controls aside. A gap near zero with a large ``base - none`` is an
InstructNet that learned to continue better but not to be steered. These are the clips it trained on:
a gap here is an upper bound on what held-out contexts can show.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch

from ..diffusion.flow import flow_loss
from ..errors import UserError
from ..models.clip_model import ClipModel
from ..models.instruct_model import InstructModel
from ..models.instructnet import controlled
from ..train.clip import open_datasets
from ..train.instruct import (InstructTrainConfig, batch_inputs, clip_controls, datasets_event_bounds, draw_sample,
                              instruct_data)

_off = dataclasses.replace
# Each row's controls from (own, shuffled, off: a batch of False flags); None is the base alone.
ROWS = (("own", lambda own, shuffled, off: own),
        ("shuffled", lambda own, shuffled, off: shuffled),
        ("none", lambda own, shuffled, off: _off(own, has_keys=off, has_instruction=off, has_prompt=off)),
        ("keys only, own", lambda own, shuffled, off: _off(own, has_instruction=off)),
        ("keys only, shuffled", lambda own, shuffled, off: _off(shuffled, has_instruction=off)),
        ("instruction only, own", lambda own, shuffled, off: _off(own, has_keys=off)),
        ("instruction only, shuffled", lambda own, shuffled, off: _off(shuffled, has_keys=off)),
        ("base", lambda own, shuffled, off: None))
DRAW_STEP = 10**9  # the draws' step index: far from any training step's draws


def control_use(model: ClipModel, instruct: InstructModel, clips: list[Path], cache: Path, batches: int = 16,
                batch_size: int = 8, seed: int = 0, prompts: tuple[str, ...] = (), event_share: float = 0.0,
                gen_text: bool = True) -> dict:
    """Mean flow loss per row of ROWS (and, per kind in ``prompts``, the prompt alone, own and shuffled)
    over ``batches`` batches, with each row's paired difference from ``own`` (mean and standard error
    over batches). A prompt kind not yet in ``cache`` is encoded there first (minutes a dataset)."""
    if batches < 2 or batch_size < 2:
        raise UserError(f"{batches} batches of {batch_size}", "use at least 2 batches of at least 2 clips")
    unread = [k for k in prompts if k not in instruct.meta.prompts]
    if unread:
        raise UserError(f"this InstructNet was not trained on {unread[0]} prompts",
                        f"pass one of: {', '.join(instruct.meta.prompts) or '(none: it reads no video prompt)'}")
    sets, captions = open_datasets(clips)
    controls = clip_controls(sets)
    if controls[0] != instruct.meta.key_names:
        raise UserError(f"these clips' keys ({', '.join(controls[0])}) are not the InstructNet's "
                        f"({', '.join(instruct.meta.key_names)})", "pass the clip datasets it trained on")
    data = instruct_data(sets, captions, controls, model, cache, prompts)
    cfg = InstructTrainConfig(prompts=[], seed=seed, event_share=event_share)  # checks the share
    bounds = datasets_event_bounds(sets, model.codec.vae.temporal_compression) if event_share > 0 else None
    shape = tuple(data.latents.shape[1:])
    cond = model.conditions(batch_size)
    steered = controlled(model.net, instruct.net)
    roll = torch.roll(torch.arange(batch_size), 1)
    off = torch.zeros(batch_size, dtype=torch.bool)
    losses: dict[str, list[float]] = {r: [] for r, _ in ROWS}
    for b in range(batches):
        # Every sample gets keys and instruction (the instruction alone for a clip without keys) and, unless
        # gen_text is off, its GEN text.
        draws = [draw_sample(cfg, DRAW_STEP + b, i, len(data.latents), shape, data.has_keys, bounds=bounds)
                 for i in range(batch_size)]
        draws = [dataclasses.replace(d, mode="keys" if data.has_keys[d.clip] else "instruction", instruction=True,
                                     drop_text=not gen_text) for d in draws]
        z, noise, t, mask, text, text_mask, own = batch_inputs(draws, data, model.codec.vae.temporal_compression,
                                                               model.net.device)
        shuffled = dataclasses.replace(own, keys=own.keys[roll], instruction=own.instruction[roll],
                                       instruction_mask=own.instruction_mask[roll])
        kwargs = {"encoder_hidden_states": text, "encoder_attention_mask": text_mask, **cond}

        def loss(c=None) -> float:
            if c is None:
                velocity = lambda x, tt: model.net(x, tt, **kwargs)  # noqa: E731
            else:
                velocity = lambda x, tt: steered(x, tt, **kwargs, **c.as_kwargs())  # noqa: E731
            with torch.inference_mode():
                return float(flow_loss(velocity, z, noise, t, mask))

        for row, controls_of in ROWS:
            losses[row].append(loss(controls_of(own, shuffled, off)))
        clip_ids = [d.clip for d in draws]
        for kind, latents in zip(prompts, data.prompts):
            p = torch.from_numpy(latents[clip_ids].astype(np.float32)).to(model.net.device)  # (B, L, C, h, w)
            for which, v in (("own", p), ("shuffled", p[roll])):
                c = _off(own, has_keys=off, has_instruction=off, prompt=v, has_prompt=~off)
                losses.setdefault(f"{kind} prompt only, {which}", []).append(loss(c))
    own_l = np.array(losses["own"])
    rows = {}
    for row, v in losses.items():
        d = np.array(v) - own_l
        rows[row] = {"loss": float(np.mean(v)), "minus_own": float(d.mean()),
                     "minus_own_se": float(d.std(ddof=1) / np.sqrt(len(d)))}
    return {"rows": rows, "batches": batches, "batch_size": batch_size, "seed": seed,
            "clips": int(len(data.latents)), "with_keys": int(data.has_keys.sum()), "event_share": event_share,
            "gen_text": gen_text,
            "instruct_steps": instruct.meta.train_steps}


def table(res: dict) -> str:
    lines = ["| controls | flow loss | minus own (± s.e.) |", "|---|---|---|"]
    for row, r in res["rows"].items():
        lines.append(f"| {row} | {r['loss']:.4f} | {r['minus_own']:+.4f} ± {r['minus_own_se']:.4f} |")
    return "\n".join(lines)
