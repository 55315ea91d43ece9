"""Character-control success (SR-C), automatic: the steered clip against the real game (GameGen-X §4.1).

The paper's SR-C is the share of clips whose character follows the control, judged by people. We
can ask the real game instead. A context is a recorded episode's frames up to frame t, from a store
the InstructNet never trained on. The real game is replayed to frame t from the episode's env seed
and recorded actions (ViZDoom is deterministic given both; the replay is checked against the
recorded frame, as ghost mode does), then one key is held for the frames the clip model makes. The
same context is continued by the clip model steered by that key. Both chunks, from the last context
frame on, get a camera label from their mean optical flow (the curation's labeller:
curate/stages.flow_camera_label on Farneback flow): pan left, pan right, forward, backward, or
static and mixed when no clear motion shows.

**Rule.** A case counts where the real game moved clearly (pan left/right, forward, backward).
It is a success when the generated chunk gets the real chunk's label. Cases where the real game did
not move clearly (a wall ahead, a door) are reported, not scored.

Beside it, on the same cases: the base clip model without InstructNet (the paper's "w/o
InstructNet" ablation), the codec's reconstruction of the real chunk (how often the label survives
the codec at all: the ceiling), and chance (1/4: one of the four moving labels).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..curate import stages as S
from ..errors import UserError

MOVING = ("pan left", "pan right", "forward", "backward")
KEYS = ("TURN_LEFT", "TURN_RIGHT", "FORWARD", "BACKWARD", "STRAFE_LEFT", "STRAFE_RIGHT")  # action names


@dataclass
class ControlEvalConfig:
    contexts_per_game: int = 4
    keys: tuple[str, ...] = KEYS
    context_latents: int = 2  # latent frames of context (5 video frames); the rest is generated
    seed: int = 0
    steps: int | None = None  # Euler steps (None: the model's)
    guidance: float | None = None


@dataclass
class Case:
    game: str
    episode: str
    t: int  # the context's last frame (episode index)
    key: str
    real: str  # camera label of the real game's chunk
    steered: str
    base: str
    codec: str
    diverged: bool = False

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class ControlResult:
    cases: list[Case] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> count

    def rate(self, column: str) -> tuple[float | None, int]:
        """(success share of ``column`` over the scored cases, scored cases)."""
        scored = [c for c in self.cases if c.real in MOVING and not c.diverged]
        if not scored:
            return None, 0
        return float(np.mean([getattr(c, column) == c.real for c in scored])), len(scored)


def camera_label(frames: np.ndarray) -> str:
    """(F, H, W, 3) uint8 -> the camera label of its mean Farneback flow (curation's thresholds)."""
    return S.flow_camera_label(S.flow(S.gray_ref(frames)), S.Thresholds())


def key_buttons(action_set, key: str) -> tuple[str, ...]:
    """The buttons an action name presses (its keys for InstructNet); the name itself without buttons."""
    i = action_set.names.index(key)
    if not action_set.buttons:
        return (key,)
    return tuple(b for b, on in zip(action_set.buttons, action_set.combos[i]) if on)


# The Act field's verbs for a key held alone (data/captions.py's words, without the distances it measures).
ACTS = {"TURN_LEFT": "turns left", "TURN_RIGHT": "turns right", "FORWARD": "walks forward",
        "BACKWARD": "walks backward", "STRAFE_LEFT": "strafes left", "STRAFE_RIGHT": "strafes right"}


def instruction_for(key: str) -> str:
    """The INS caption's Act and Misc fields of a clip where ``key`` (an action name) is held throughout,
    as data/captions.py words them: the instruction a player who types none is given."""
    act = ACTS.get(key, f"presses {key}")
    return f"Act: The player {act}. Misc: Keys: {key} 100% (dominant: {key})."


def replay(env, env_seed: int, actions: np.ndarray, expect: np.ndarray):
    """Reset to ``env_seed`` and step ``actions``; -> (the env at the last frame, diverged)."""
    obs = env.reset(int(env_seed))
    for a in actions:
        nxt = env.step(int(a))
        if nxt.frame is None:
            return None, True
        obs = nxt
    return obs, not np.array_equal(obs.frame, expect)


def hold(env, action: int, steps: int, first: np.ndarray) -> np.ndarray:
    """(steps + 1, H, W, 3): ``first`` then the frames of holding ``action``; the last frame repeats
    where the episode ends."""
    frames = [first]
    for _ in range(steps):
        nxt = env.step(action)
        frames.append(frames[-1] if nxt.frame is None else nxt.frame)
        if nxt.frame is None or nxt.terminated or nxt.truncated:
            frames += [frames[-1]] * (steps + 1 - len(frames))
            break
    return np.stack(frames)


def evaluate_control(model, instruct, stores: list, cfg: ControlEvalConfig, report=lambda n: None) -> tuple[ControlResult, dict]:
    """SR-C on ``stores`` (trajectory stores the InstructNet never trained on). -> (result, strips:
    {(game, key): (3, W * frames) rows: real, steered, base})."""
    from ..data.captions import caption, caption_text
    from ..data.store import Store
    from ..engine.clip import Steering, continue_clip
    from ..envs import make_env
    from ..envs.base import EnvConfig

    m = model.meta
    r = model.codec.vae.temporal_compression
    used = 1 + r * (cfg.context_latents - 1)
    gen = m.frames - used
    if not 1 <= cfg.context_latents < model.latent_shape[0]:
        raise UserError(f"--context-latents {cfg.context_latents}", f"use 1 to {model.latent_shape[0] - 1}")
    res, strips = ControlResult(), {}
    rng = np.random.default_rng(cfg.seed)
    for path in stores:
        store = Store.open(path)
        spec = store.spec
        game = spec.env_id
        if (spec.height, spec.width) != (m.height, m.width):
            raise UserError(f"store {path} has {spec.width}x{spec.height} frames, the model makes {m.width}x{m.height}",
                            "evaluate on stores of the model's size")
        episodes = [e for e in store.episodes() if e.length > used + gen and e.meta.get("env_seed") is not None]
        if not episodes:
            raise UserError(f"store {path} has no episode of {used + gen + 1} frames with an env seed",
                            "record longer episodes with `gamengen record`")
        env = make_env(game, EnvConfig(height=spec.height, width=spec.width, frame_skip=spec.frame_skip,
                                       labels=spec.labels, events=bool(spec.events),
                                       **({"event_period_s": spec.event_period_s} if spec.event_period_s else {})))
        try:
            for _ in range(cfg.contexts_per_game):
                rec = episodes[int(rng.integers(len(episodes)))]
                t = int(rng.integers(used - 1, rec.length - gen - 1))
                g = store.open_episode(rec)
                context = np.asarray(g["frames"][t - used + 1:t + 1])
                actions = np.asarray(g["actions"][:t], np.int64)
                prompt = caption_text(caption(store, rec, t - used + 1, t + 1))
                base_clip = continue_clip(model, context, prompt, cfg.seed, cfg.steps, cfg.guidance)
                base_label = camera_label(base_clip[used - 1:])
                for key in cfg.keys:
                    if key not in spec.action_set.names:
                        res.skipped[f"{key} not in {game}'s actions"] = res.skipped.get(f"{key} not in {game}'s actions", 0) + 1
                        continue
                    _, diverged = replay(env, rec.meta["env_seed"], actions, context[-1])
                    real = hold(env, spec.action_set.names.index(key), gen, context[-1])
                    buttons = key_buttons(spec.action_set, key)
                    steer = Steering(instruct, buttons, instruction_for(key))
                    steered = continue_clip(model, context, prompt, cfg.seed, cfg.steps, cfg.guidance, steer=steer)
                    with _no_grad():
                        recon = model.codec.decode_clip(model.codec.encode_clip(np.concatenate([context, real[1:]])))
                    res.cases.append(Case(game, rec.path, t, key, camera_label(real), camera_label(steered[used - 1:]),
                                          base_label, camera_label(recon[used - 1:]), diverged))
                    strips.setdefault((game, key), np.concatenate([np.concatenate(list(v[used - 1:]), axis=1) for v in
                                                                   (real, steered[used - 1:], base_clip[used - 1:])]))
                    report(1)
        finally:
            env.close()
    return res, strips


def _no_grad():
    import torch

    return torch.inference_mode()


def write_report(out, res: ControlResult, strips: dict, command: str) -> dict:
    """report.json, report.md and strips/<game>-<key>.png (rows: real game, steered, base) into the
    new folder ``out``, written whole (atomic.write_folder_atomic). -> the summary."""
    import json
    from pathlib import Path

    from ..atomic import write_folder_atomic, write_png

    summary = {"rule": "a case is scored when the real game's chunk has a moving camera label (pan left/right, "
                       "forward, backward); success: the generated chunk gets the same label",
               "chance": 1 / len(MOVING)}
    for column in ("steered", "base", "codec"):
        rate, n = res.rate(column)
        summary[column] = rate
        summary["scored"] = n
    summary["by_key"] = {}
    for key in dict.fromkeys(c.key for c in res.cases):
        sub = ControlResult([c for c in res.cases if c.key == key])
        summary["by_key"][key] = {col: sub.rate(col)[0] for col in ("steered", "base", "codec")} | {"scored": sub.rate("steered")[1]}
    summary["cases"], summary["diverged"] = len(res.cases), sum(c.diverged for c in res.cases)
    summary["unclear_real_motion"] = sum(c.real not in MOVING for c in res.cases)
    summary["skipped"] = res.skipped

    def fmt(v):
        return "n/a" if v is None else f"{v:.2f}"

    lines = ["# Character control (SR-C), automatic", "", f"`{command}`", "", summary["rule"] + ".", "",
             "| | SR-C | scored cases |", "|---|---|---|",
             f"| InstructNet (keys + their instruction) | {fmt(summary['steered'])} | {summary['scored']} |",
             f"| base without InstructNet (ablation) | {fmt(summary['base'])} | {summary['scored']} |",
             f"| codec reconstruction of the real chunk (ceiling) | {fmt(summary['codec'])} | {summary['scored']} |",
             f"| chance | {summary['chance']:.2f} | |", "",
             "| key | InstructNet | base | codec | scored |", "|---|---|---|---|---|"]
    lines += [f"| {k} | {fmt(v['steered'])} | {fmt(v['base'])} | {fmt(v['codec'])} | {v['scored']} |"
              for k, v in summary["by_key"].items()]
    lines += ["", f"{summary['cases']} cases; {summary['unclear_real_motion']} where the real game showed no clear "
              f"motion (not scored); {summary['diverged']} whose replay diverged (not scored).", ""]

    def write(tmp: Path) -> None:
        (tmp / "strips").mkdir(parents=True)
        for (game, key), image in strips.items():
            write_png(tmp / "strips" / f"{game.replace(':', '-').replace('/', '-')}-{key}.png", image)
        (tmp / "report.json").write_text(json.dumps({**summary, "cases": [c.to_json() for c in res.cases]}, indent=1))
        (tmp / "report.md").write_text("\n".join(lines))

    write_folder_atomic(out, write)
    return summary
