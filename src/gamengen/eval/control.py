"""Character-control success (SR-C), automatic: the steered clip against the real game (GameGen-X §4.1).

The paper's SR-C is the share of clips whose character follows the control, judged by people. We
can ask the real game instead. A context is a recorded episode's frames up to frame t, from a store
the InstructNet never trained on. The real game is replayed to frame t from the episode's env seed
and recorded actions (ViZDoom is deterministic given both; the replay is checked against the
recorded frame, as ghost mode does), then one key is held for the frames the clip model makes. The
same context is continued by the clip model steered by that key. The real chunk, from the last
context frame on, gets the curation's camera label from its mean optical flow
(curate/stages.flow_camera_label on Farneback flow): pan left, pan right, forward, backward, or static
and mixed when no clear motion shows. A generated chunk gets the direction of its mean flow however
small (``direction_label``): decoded clips are much smoother than the game, and the thresholds made
for real frames call even the codec's own reconstruction of a real chunk static.

**Rule.** A case counts where the real game moved clearly (pan left/right, forward, backward).
It is a success when the generated chunk's flow goes the real chunk's way. Cases where the real game did
not move clearly (a wall ahead, a door) are reported, not scored.

Beside it, on the same cases: the base clip model without InstructNet (the paper's "w/o
InstructNet" ablation), the codec's reconstruction of the real chunk (how often the label survives
the codec at all: the ceiling), and chance (1/4: one of the four moving labels).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from ..curate import stages as S
from ..errors import UserError

MOVING = ("pan left", "pan right", "forward", "backward")
# The keys held, by action name: the Freedoom stores' (FORWARD, STRAFE_LEFT, ...) and the scenarios'
# (MOVE_FORWARD, ...); a key a game lacks is skipped for that game. For each, its own way: how it alone
# moves the view where nothing blocks it (a strafe slides the scene as a pan does; a wall or a door
# stops the real game, not the key). Its words in an instruction are data/captions.KEY_WORDS.
KEY_WAY = {"TURN_LEFT": "pan left", "TURN_RIGHT": "pan right", "FORWARD": "forward", "BACKWARD": "backward",
           "STRAFE_LEFT": "pan left", "STRAFE_RIGHT": "pan right", "MOVE_FORWARD": "forward",
           "MOVE_BACKWARD": "backward", "MOVE_LEFT": "pan left", "MOVE_RIGHT": "pan right"}
KEYS = tuple(KEY_WAY)
INSTRUCTIONS = ("short", "full", "none")


@dataclass
class ControlEvalConfig:
    contexts_per_game: int = 4
    keys: tuple[str, ...] = KEYS
    context_latents: int = 2  # latent frames of context (5 video frames); the rest is generated
    seed: int = 0
    steps: int | None = None  # Euler steps (None: the model's)
    guidance: float | None = None
    control_guidance: float = 4.0  # engine/clip.CONTROL_GUIDANCE (a test holds them equal): CFG on the controls
    # The instruction each case is given: "short", the fields the request is about (Act and Misc for a
    # key, Trans and Light for an event); "full", all five INS fields as InstructNet trained on them
    # (data/captions.request_instruction: Env from the context's caption, the rest from the request);
    # "none", no instruction (a key alone; an event then has nothing to ask for it).
    instructions: str = "short"
    # bf16 autocast for the base's and the steered continuations, as clip play runs where the CPU has
    # bf16 units (the codec ceiling stays fp32)
    bf16: bool = False

    def __post_init__(self):
        from ..engine.clip import check_control_guidance

        check_control_guidance(self.control_guidance)  # before any case is generated
        if self.instructions not in INSTRUCTIONS:
            raise UserError(f"instructions {self.instructions!r} is not one of {', '.join(INSTRUCTIONS)}",
                            "pass --instructions short, full or none")


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


@dataclass
class ControlResult:
    cases: list[Case] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> count
    events: list["EventCase"] = field(default_factory=list)

    def rate(self, column: str) -> tuple[float | None, int]:
        """SR-C: (success share of ``column`` over the scored cases, scored cases)."""
        scored = [c for c in self.cases if c.real in MOVING and not c.diverged]
        if not scored:
            return None, 0
        return float(np.mean([getattr(c, column) == c.real for c in scored])), len(scored)

    def key_way_rate(self, column: str) -> tuple[float | None, int]:
        """(share of the cases, scored or not, whose ``column`` chunk goes its key's own way (KEY_WAY),
        cases with a key of known way): whether the keys steer at all, whatever the real game did."""
        known = [c for c in self.cases if c.key in KEY_WAY]
        if not known:
            return None, 0
        return float(np.mean([getattr(c, column) == KEY_WAY[c.key] for c in known])), len(known)

    def contexts_changed(self, column: str) -> tuple[int, int]:
        """(contexts where ``column``'s chunks do not all get one label across the keys, contexts with
        two keys or more). The base reads no key, so with one noise seed it changes none."""
        labels: dict[tuple, list[str]] = {}
        for c in self.cases:
            labels.setdefault((c.game, c.episode, c.t), []).append(getattr(c, column))
        several = [v for v in labels.values() if len(v) > 1]
        return sum(len(set(v)) > 1 for v in several), len(several)

    def event_rate(self, column: str) -> tuple[float | None, int]:
        """SR-E: (share of the cases whose real chunk shows the event where ``column``'s does too, cases)."""
        scored = [c for c in self.events if c.real and not c.diverged]
        if not scored:
            return None, 0
        return float(np.mean([getattr(c, column) for c in scored])), len(scored)


def camera_label(frames: np.ndarray) -> str:
    """(F, H, W, 3) uint8 -> the camera label of its mean Farneback flow (curation's thresholds)."""
    return S.flow_camera_label(S.flow(S.gray_ref(frames)), S.Thresholds())


def direction_label(frames: np.ndarray) -> str:
    """(F, H, W, 3) uint8 -> which way its mean flow goes, however little: a pan by the sign of the
    horizontal flow where it beats the radial one, else forward or backward by the radial flow's sign.
    Decoded clips are smoother than the game (the codec's reconstruction of a real chunk has a fifth
    of its flow, docs/gamegen_x.md), so the curation's thresholds would call nearly every one static."""
    fl = S.flow(S.gray_ref(frames))
    if abs(fl.dx) >= abs(fl.radial):
        return "pan left" if fl.dx > 0 else "pan right"
    return "forward" if fl.radial > 0 else "backward"


def key_buttons(action_set, key: str) -> tuple[str, ...]:
    """The buttons an action name presses (its keys for InstructNet); the name itself without buttons."""
    i = action_set.names.index(key)
    if not action_set.buttons:
        return (key,)
    return tuple(b for b, on in zip(action_set.buttons, action_set.combos[i]) if on)


def instruction(cfg: ControlEvalConfig, c: "Context", key: str, event=None) -> str | None:
    """The instruction of a case (cfg.instructions): for context ``c`` with the action ``key`` held
    and ``event`` (a GameEvent, or None) fired, worded by data/captions."""
    from ..data.captions import event_request, key_request, mean_rgb, request_instruction

    if cfg.instructions == "full":
        return request_instruction(c.fields, float(mean_rgb(c.frames[-1]).mean()), key, event)
    if cfg.instructions == "none":
        return None
    return key_request(key) if event is None else event_request(event)


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


def chunk(model, cfg: ControlEvalConfig) -> tuple[int, int]:
    """(context frames, generated frames) of one steered continuation."""
    L, r = model.latent_shape[0], model.codec.vae.temporal_compression
    if not 1 <= cfg.context_latents < L:
        raise UserError(f"--context-latents {cfg.context_latents}", f"use 1 to {L - 1}")
    used = 1 + r * (cfg.context_latents - 1)
    return used, model.meta.frames - used


@dataclass
class Context:
    """A held-out context: an episode's frames up to frame t, what the real game replays to reach it, the
    caption of those frames (the clip model's prompt) and the base clip model's continuation of it."""

    episode: str
    t: int
    env_seed: int
    frames: np.ndarray  # (used, H, W, 3) uint8: frames t - used + 1 .. t
    actions: np.ndarray  # (t,) every action before frame t
    prompt: str
    base: np.ndarray  # (F, H, W, 3) the base's continuation, no InstructNet
    fields: dict  # the context frames' caption fields (data/captions.caption), GEN and INS


def contexts(model, store, cfg: ControlEvalConfig, rng, used: int, gen: int):
    """cfg.contexts_per_game Contexts of ``store``, at random frames of its episodes long enough to hold
    ``used`` context frames and ``gen`` more, drawn from ``rng``."""
    from ..data.captions import caption, caption_text
    from ..engine.clip import continue_clip

    episodes = [e for e in store.episodes() if e.length > used + gen and e.meta.get("env_seed") is not None]
    if not episodes:
        raise UserError(f"store {store.root} has no episode of {used + gen + 1} frames with an env seed",
                        "record longer episodes with `gamengen record`")
    for _ in range(cfg.contexts_per_game):
        rec = episodes[int(rng.integers(len(episodes)))]
        t = int(rng.integers(used - 1, rec.length - gen - 1))
        g = store.open_episode(rec)
        frames = np.asarray(g["frames"][t - used + 1:t + 1])
        fields = caption(store, rec, t - used + 1, t + 1)
        prompt = caption_text(fields)
        yield Context(rec.path, t, int(rec.meta["env_seed"]), frames, np.asarray(g["actions"][:t], np.int64), prompt,
                      continue_clip(model, frames, prompt, cfg.seed, cfg.steps, cfg.guidance, bf16=cfg.bf16), fields)


def evaluate_control(model, instruct, stores: list, cfg: ControlEvalConfig, report=lambda n: None) -> tuple[ControlResult, dict]:
    """SR-C on ``stores`` (trajectory stores the InstructNet never trained on). -> (result, strips:
    {(game, key): (3, W * frames) rows: real, steered, base})."""
    from ..data.store import Store
    from ..engine.clip import Steering, continue_clip

    m = model.meta
    used, gen = chunk(model, cfg)
    res, strips = ControlResult(), {}
    rng = np.random.default_rng(cfg.seed)
    for path in stores:
        store = Store.open(path)
        spec = store.spec
        game = spec.env_id
        if (spec.height, spec.width) != (m.height, m.width):
            raise UserError(f"store {path} has {spec.width}x{spec.height} frames, the model makes {m.width}x{m.height}",
                            "evaluate on stores of the model's size")
        env = _env(spec)
        try:
            for c in contexts(model, store, cfg, rng, used, gen):
                base_label = direction_label(c.base[used - 1:])
                for key in cfg.keys:
                    if key not in spec.action_set.names:
                        res.skipped[f"{key} not in {game}'s actions"] = res.skipped.get(f"{key} not in {game}'s actions", 0) + 1
                        continue
                    _, diverged = replay(env, c.env_seed, c.actions, c.frames[-1])
                    real = hold(env, spec.action_set.names.index(key), gen, c.frames[-1])
                    buttons = key_buttons(spec.action_set, key)
                    steer = Steering(instruct, buttons, instruction(cfg, c, key), guidance=cfg.control_guidance)
                    steered = continue_clip(model, c.frames, c.prompt, cfg.seed, cfg.steps, cfg.guidance, steer=steer,
                                            bf16=cfg.bf16)
                    recon = through_codec(model, np.concatenate([c.frames, real[1:]]))
                    res.cases.append(Case(game, c.episode, c.t, key, camera_label(real), direction_label(steered[used - 1:]),
                                          base_label, direction_label(recon[used - 1:]), diverged))
                    strips.setdefault((game, key), np.concatenate([np.concatenate(list(v[used - 1:]), axis=1) for v in
                                                                   (real, steered[used - 1:], c.base[used - 1:])]))
                    report(1)
        finally:
            env.close()
    return res, strips


def through_codec(model, frames: np.ndarray) -> np.ndarray:
    """The codec's reconstruction of uint8 frames (F, H, W, 3): the ceiling of what any clip can show."""
    import torch

    with torch.inference_mode():
        return model.codec.decode_clip(model.codec.encode_clip(frames))


# SR-E's events: those whose effect shows in the picture's mean colour (data/captions.picture_effect),
# so a rule on pixels can tell, as on the real game's frames; and, given `clip eval`'s judge, the
# summons of objects it knows (``appears``). Items and weapons given change game variables, which
# no picture rule or judge here reads: not measured.
PICTURE_EVENTS = ("light_amp", "lights_dim", "lights_bright", "radiation_suit", "berserk", "invulnerability")
APPEARS = 0.5  # the judge's probability from which an object counts as in view


@dataclass
class EventCase:
    game: str
    episode: str
    t: int
    event: str
    real: bool  # the rule sees the effect in the real game's chunk
    steered: bool
    base: bool
    codec: bool
    diverged: bool = False


def shows(effect: str, frames: np.ndarray, used: int) -> bool:
    """The picture rule on a chunk: from the last context frame to the mean of the last four frames
    (the last latent frame; a generated change may take a few frames to show)."""
    from ..data.captions import mean_rgb, picture_effect

    return bool(picture_effect(effect, mean_rgb(frames[used - 1]), mean_rgb(frames[-4:]).mean(0)))


def appears(classifier, k: int, frames: np.ndarray, used: int) -> bool:
    """The object rule on a chunk: the judge sees vocabulary object ``k`` in one of the last four
    frames and not in the last context frame: it came into view."""
    p = classifier.object_probs(frames)[:, k]  # (F,)
    return bool(p[-4:].max() >= APPEARS and p[used - 1] < APPEARS)


def event_rule(event, classifier=None):
    """``rule(frames, used) -> bool`` that tells whether ``event`` shows in a chunk, or None when
    nothing here can: a picture event's colour rule, or a summon the judge ``classifier`` knows."""
    from ..data.captions import MONSTERS

    if event.name in PICTURE_EVENTS:
        return lambda frames, used: shows(event.effect, frames, used)
    kind, _, label = event.effect.partition(":")
    names = [name for name, _ in classifier.objects] if classifier is not None else []
    if kind == "label" and MONSTERS.get(label) in names:
        k = names.index(MONSTERS[label])
        return lambda frames, used: appears(classifier, k, frames, used)
    return None


def evaluate_events(model, instruct, stores: list, cfg: ControlEvalConfig, report=lambda n: None,
                    classifier=None) -> list[EventCase]:
    """SR-E on stores recorded with --events, for each event an ``event_rule`` can judge (with
    ``classifier``, `clip eval`'s judge, the summons too): each context continued with each event's
    instruction; the real game replayed there, the event fired, then no key held."""
    from ..data.store import Store
    from ..engine.clip import Steering, continue_clip

    used, gen = chunk(model, cfg)
    rng = np.random.default_rng(cfg.seed + 1)
    cases = []
    for path in stores:
        store = Store.open(path)
        spec = store.spec
        names = [e.name for e in spec.events]
        events = [(ev, rule) for ev in spec.events if (rule := event_rule(ev, classifier)) is not None]
        if not events:
            continue
        env = _env(spec)
        noop = spec.action_set.names.index("NOOP") if "NOOP" in spec.action_set.names else 0
        try:
            for c in contexts(model, store, cfg, rng, used, gen):
                for ev, rule in events:
                    _, diverged = replay(env, c.env_seed, c.actions, c.frames[-1])
                    env.fire_event(names.index(ev.name))
                    real = np.concatenate([c.frames, hold(env, noop, gen, c.frames[-1])[1:]])
                    text = instruction(cfg, c, spec.action_set.names[noop], ev)
                    steered = continue_clip(model, c.frames, c.prompt, cfg.seed, cfg.steps, cfg.guidance,
                                            steer=Steering(instruct, instruction=text, guidance=cfg.control_guidance),
                                            bf16=cfg.bf16)
                    recon = through_codec(model, real)
                    cases.append(EventCase(spec.env_id, c.episode, c.t, ev.name, rule(real, used), rule(steered, used),
                                           rule(c.base, used), rule(recon, used), diverged))
                    report(1)
        finally:
            env.close()
    return cases


def _env(spec):
    """The real game as the store recorded it (events on the same schedule), for replays."""
    from ..envs import make_env
    from ..envs.base import EnvConfig

    return make_env(spec.env_id, EnvConfig(height=spec.height, width=spec.width, frame_skip=spec.frame_skip,
                                           labels=spec.labels, events=bool(spec.events),
                                           event_kinds=tuple(e.name for e in spec.events[1:]),
                                           event_clear_s=spec.event_clear_s,
                                           **({"event_period_s": spec.event_period_s} if spec.event_period_s else {})))


def write_report(out, res: ControlResult, strips: dict, command: str) -> dict:
    """report.json, report.md and strips/<game>-<key>.png (rows: real game, steered, base) into the
    new folder ``out``, written whole (atomic.write_folder_atomic). -> the summary."""
    import json
    from pathlib import Path

    from ..atomic import write_folder_atomic, write_png

    columns = ("steered", "base", "codec")
    sr_c = {col: res.rate(col)[0] for col in columns} | {"scored": res.rate("steered")[1], "chance": 1 / len(MOVING)}
    sr_c["by_key"] = {}
    for key in dict.fromkeys(c.key for c in res.cases):
        sub = ControlResult([c for c in res.cases if c.key == key])
        sr_c["by_key"][key] = {col: sub.rate(col)[0] for col in columns} | {"scored": sub.rate("steered")[1]}
    sr_c["key_way"] = {col: res.key_way_rate(col)[0] for col in columns} | {"cases": res.key_way_rate("steered")[1]}
    sr_c["contexts_changed"] = {col: res.contexts_changed(col)[0] for col in ("steered", "base")} | {
        "contexts": res.contexts_changed("steered")[1]}
    sr_e = {col: res.event_rate(col)[0] for col in columns} | {"scored": res.event_rate("steered")[1]}
    sr_e["by_event"] = {}
    for name in dict.fromkeys(c.event for c in res.events):
        sub = ControlResult(events=[c for c in res.events if c.event == name])
        sr_e["by_event"][name] = {col: sub.event_rate(col)[0] for col in columns} | {"scored": sub.event_rate("steered")[1]}
    summary = {"sr_c": sr_c, "sr_e": sr_e, "cases": len(res.cases), "event_cases": len(res.events),
               "diverged": sum(c.diverged for c in (*res.cases, *res.events)),
               "unclear_real_motion": sum(c.real not in MOVING for c in res.cases),
               "event_not_seen_in_real_game": sum(not c.real for c in res.events), "skipped": res.skipped}

    def fmt(v):
        return "n/a" if v is None else f"{v:.2f}"

    lines = ["# Control success, automatic (SR-C, SR-E)", "", f"`{command}`", "",
             "**SR-C**: each context continued under each key; the camera label of the chunk's mean optical flow "
             "against the real game's under the same key from the same state (replayed). A case is scored when the "
             "real game moved clearly (pan left/right, forward, backward); success: the generated chunk's mean flow goes the same way (its direction however small: decoded clips are smoother than the game).", "",
             "**SR-E**: each context continued with an event's instruction; the real game replayed there and the "
             "event fired. A case is scored when the event's rule sees it in the real game; success: it sees it in "
             "the clip. Lighting and tint events: the picture rule (mean brightness or tint, last context frame "
             "against the last four frames). Summons, with `--classifier`: the judge of `clip eval` sees the "
             f"monster (probability >= {APPEARS}) in one of the last four frames and not in the last context frame.", "",
             "| | SR-C | SR-E |", "|---|---|---|",
             f"| InstructNet (with the key's or event's instruction) | {fmt(sr_c['steered'])} | {fmt(sr_e['steered'])} |",
             f"| base without InstructNet (ablation) | {fmt(sr_c['base'])} | {fmt(sr_e['base'])} |",
             f"| codec reconstruction of the real chunk (ceiling) | {fmt(sr_c['codec'])} | {fmt(sr_e['codec'])} |",
             f"| chance | {sr_c['chance']:.2f} | (the base row: the event without asking) |",
             f"| scored cases | {sr_c['scored']} | {sr_e['scored']} |", "",
             "| key | InstructNet | base | codec | scored |", "|---|---|---|---|---|"]
    lines += [f"| {k} | {fmt(v['steered'])} | {fmt(v['base'])} | {fmt(v['codec'])} | {v['scored']} |"
              for k, v in sr_c["by_key"].items()]
    way, changed = sr_c["key_way"], sr_c["contexts_changed"]
    lines += ["", "Beside the real game, whether the keys steer at all: the chunk goes its key's own way (turn or "
              "strafe left: pan left; forward; backward; ...) over every case with such a key, scored or not, and "
              "the contexts whose chunks differ by key.", "",
              "| | InstructNet | base | codec | chance |", "|---|---|---|---|---|",
              f"| chunk goes its key's own way ({way['cases']} cases) | {fmt(way['steered'])} | {fmt(way['base'])} | "
              f"{fmt(way['codec'])} | {1 / len(MOVING):.2f} |",
              f"| contexts whose chunks differ by key | {changed['steered']} of {changed['contexts']} | "
              f"{changed['base']} of {changed['contexts']} | | |"]
    lines += ["", "| event | InstructNet | base | codec | scored |", "|---|---|---|---|---|"]
    lines += [f"| {k} | {fmt(v['steered'])} | {fmt(v['base'])} | {fmt(v['codec'])} | {v['scored']} |"
              for k, v in sr_e["by_event"].items()]
    lines += ["", f"{summary['cases']} key cases, {summary['unclear_real_motion']} with no clear motion in the real game "
              f"(not scored); {summary['event_cases']} event cases, {summary['event_not_seen_in_real_game']} whose event "
              f"the rule does not see in the real game (not scored); {summary['diverged']} replays diverged (not "
              "scored). Items and weapons given are not measured: they change game variables, which no rule here "
              "reads" + ("" if any(c.event.startswith("summon") for c in res.events) else
                         "; summons need `--classifier`") + ".", ""]

    def write(tmp: Path) -> None:
        (tmp / "strips").mkdir(parents=True)
        for (game, key), image in strips.items():
            write_png(tmp / "strips" / f"{game.replace(':', '-').replace('/', '-')}-{key}.png", image)
        (tmp / "report.json").write_text(json.dumps({**summary, "command": command, "cases": [asdict(c) for c in res.cases],
                                                     "events": [asdict(c) for c in res.events]}, indent=1))
        (tmp / "report.md").write_text("\n".join(lines))

    write_folder_atomic(out, write)
    return summary
