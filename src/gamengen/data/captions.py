"""Structured captions of recorded clips, written from the trajectory store alone (docs/captions.md).

GameGen-X (§3.2, OGameData) captions every clip twice with GPT-4o looking at 8 frames: a GEN caption
of five fields (Summary, Game_Meta, Character, Frame_Desc, Atmosphere) for generation, and an INS
caption of five more (Env, Trans, Light, Act, Misc; Misc holds the keys and the camera motion) for
instruction tuning. Here no vision model looks at anything: every field is a fixed English template
filled from what the recording logged, which a captioner can only guess at, exactly: the game and
level, game variables, the actions taken, camera motion measured from ANGLE and POSITION_X/Y, the
in-game events fired (and whether their effect shows), the objects in view (labels) and the mean
colour of the frames. A field whose data a store lacks says less, and never invents.

The same store window gives the same caption, word for word.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ..envs.base import GameEvent, Step
from ..errors import UserError
from .store import EpisodeRecord, Store, read_events, read_labels

GEN_FIELDS = ("Summary", "Game_Meta", "Character", "Frame_Desc", "Atmosphere")
INS_FIELDS = ("Env", "Trans", "Light", "Act", "Misc")
# GameGen-X encodes captions with T5 at up to 300 tokens (§3.3). No T5 tokenizer ships here, so
# each text is held to MAX_WORDS words and to estimate_tokens() <= MAX_TOKENS, an estimate made to
# over-count (see there). The templates stay far below both (about 90-170 words).
MAX_WORDS = 250
MAX_TOKENS = 300

# Camera motion, from ANGLE (degrees, counter-clockwise, so turning left raises it) and
# POSITION_X/Y (map units; the DOOM player walks at up to ~280 units/s, turns at up to ~120 deg/s).
TURN_MIN_DEG = 30.0  # a net turn below this is not "turning"
TURN_NET_SHARE = 0.5  # the net turn must be at least half of all turning, else "looking around"
LOOK_AROUND_DEG = 60.0  # that much turning both ways with a small net turn is "looking around"
MOVE_MIN_UNITS_PER_S = 32.0  # below ~1/9 of walking speed (the player is 32 units wide) is "static"
MOVE_DIR_SHARE = 0.5  # the main direction must carry half the path, else "moving around"
# Event effects: how long after an event its effect may take to show (a weapon switch lowers one
# weapon and raises the next, ~0.5 s) and how big a change of the picture counts.
CONFIRM_S = 2.0
LIGHT_DELTA = 3.0  # mean brightness (0-255) change between the frames before and after
TINT_DELTA = 10.0  # rise of one channel above the mean of the other two
GREY_SATURATION = 0.05  # (max - min channel mean) / brightness below this is a grey picture

DOOM_WEAPONS = {1: "fist", 2: "pistol", 3: "shotgun", 4: "chaingun", 5: "rocket launcher", 6: "plasma rifle",
                7: "BFG 9000"}  # SELECTED_WEAPON is the weapon slot
# ViZDoom label names (the engine's actor classes) -> (English, category). Unknown names are split
# at capitals and digits and count as scenery.
MONSTERS = {"Zombieman": "zombieman", "ShotgunGuy": "shotgun guy", "ChaingunGuy": "chaingunner", "DoomImp": "imp",
            "Demon": "demon", "Spectre": "spectre", "LostSoul": "lost soul", "Cacodemon": "cacodemon",
            "HellKnight": "hell knight", "BaronOfHell": "baron of hell", "Arachnotron": "arachnotron",
            "PainElemental": "pain elemental", "Revenant": "revenant", "Fatso": "mancubus", "Archvile": "arch-vile",
            "Cyberdemon": "cyberdemon", "SpiderMastermind": "spider mastermind", "WolfensteinSS": "SS guard",
            "MarineChainsawVzd": "chainsaw marine"}
ITEMS = {"Clip": "ammo clip", "ClipBox": "box of bullets", "Shell": "shotgun shells", "ShellBox": "box of shells",
         "RocketAmmo": "rocket", "RocketBox": "box of rockets", "Cell": "energy cell", "CellPack": "energy cell pack",
         "Stimpack": "stimpack", "Medikit": "medikit", "HealthBonus": "health bonus", "ArmorBonus": "armor bonus",
         "GreenArmor": "green armor", "BlueArmor": "blue armor", "Soulsphere": "soulsphere", "Megasphere": "megasphere",
         "InvulnerabilitySphere": "invulnerability sphere", "BlurSphere": "partial invisibility sphere",
         "Berserk": "berserk pack", "Radsuit": "radiation suit", "Infrared": "light-amplification goggles",
         "Allmap": "computer map", "Backpack": "backpack", "Shotgun": "shotgun", "SuperShotgun": "super shotgun",
         "Chaingun": "chaingun", "RocketLauncher": "rocket launcher", "PlasmaRifle": "plasma rifle",
         "BFG9000": "BFG 9000", "Chainsaw": "chainsaw", "BlueCard": "blue keycard", "RedCard": "red keycard",
         "YellowCard": "yellow keycard", "BlueSkull": "blue skull key", "RedSkull": "red skull key",
         "YellowSkull": "yellow skull key"}
EFFECTS = {"BulletPuff": "bullet puff", "Blood": "blood", "DoomImpBall": "imp fireball",
           "CacodemonBall": "cacodemon fireball", "BaronBall": "baron fireball", "Rocket": "rocket in flight",
           "PlasmaBall": "plasma bolt", "BFGBall": "BFG blast", "TeleportFog": "teleport flash",
           "ItemFog": "item respawn flash", "ArachnotronPlasma": "plasma bolt", "RevenantTracer": "homing missile",
           "FatShot": "mancubus fireball"}
CATEGORY_ORDER = ("monster", "item", "scenery", "effect")


# -- what a stretch of steps shows ------------------------------------------------------------------
@dataclass
class Observed:
    """Per-step data of consecutive steps, aligned: the part of a recording captions read."""

    variables: dict[str, np.ndarray]  # name -> (n,) float
    rgb: np.ndarray  # (n, 3) mean R, G, B of each frame
    labels: dict[str, np.ndarray] | None = None  # object name -> (n,) count in view; None: not recorded

    @property
    def brightness(self) -> np.ndarray:
        return self.rgb.mean(axis=1)

    @classmethod
    def from_steps(cls, steps: list[Step], variable_names: tuple[str, ...]) -> "Observed":
        """The same view of a live game's steps (tests check each event's effect with it); a final
        step without a picture is left out, as the store leaves it out."""
        steps = [s for s in steps if s.frame is not None]
        names = sorted({n for s in steps for n in s.labels})
        return cls({v: np.array([s.variables.get(v, np.nan) for s in steps], float) for v in variable_names},
                   np.stack([mean_rgb(s.frame) for s in steps]),
                   {n: np.array([s.labels.get(n, 0) for s in steps]) for n in names})


def mean_rgb(frames: np.ndarray) -> np.ndarray:
    """Mean R, G, B of one (H, W, 3) frame -> (3,), or of (n, H, W, 3) frames -> (n, 3)."""
    return np.asarray(frames, np.float64).mean(axis=(-3, -2))


def effect_seen(effect: str, t: int, obs: Observed, horizon: int) -> bool | None:
    """Does ``obs`` show an event's ``effect`` (GameEvent.effect) after it was fired at step t?

    The event runs with actions[t], so the earliest frame that can show it is t + 1; changes are
    looked for up to t + horizon. None: the data it needs was not recorded, or no frame after t."""
    n = len(obs.rgb)
    end = min(n, t + 1 + horizon)
    if t + 1 >= n:
        return None
    kind, _, arg = effect.partition(":")
    if kind == "label":
        if obs.labels is None:
            return None
        counts = obs.labels.get(arg)
        return bool(counts is not None and counts[t + 1:end].max(initial=0) > counts[t])
    if kind == "var":
        m = re.fullmatch(r"(\w+)([>=])(-?[\d.]*)", arg)
        if not m or m.group(1) not in obs.variables:
            return None
        v = obs.variables[m.group(1)]
        after = v[t + 1:end]
        if m.group(2) == ">":
            return bool(np.any(after > v[t]))
        return bool(v[t] != float(m.group(3)) and np.any(after == float(m.group(3))))
    return picture_effect(effect, obs.rgb[t], obs.rgb[t + 1])  # picture changes show on the very next frame


def picture_effect(effect: str, before: np.ndarray, after: np.ndarray) -> bool | None:
    """Does the mean colour go from ``before`` to ``after`` (each (3,) RGB) as a lighting or tint
    ``effect`` says (light>, light<, tint:red, tint:green, tint:grey)? None for other effects."""
    kind, _, arg = effect.partition(":")
    if effect == "light>":
        return bool(after.mean() - before.mean() >= LIGHT_DELTA)
    if effect == "light<":
        return bool(before.mean() - after.mean() >= LIGHT_DELTA)
    if kind == "tint" and arg in ("red", "green"):
        c = 0 if arg == "red" else 1
        return bool(_excess(after, c) - _excess(before, c) >= TINT_DELTA)
    if effect == "tint:grey":
        return bool(_saturation(after) < GREY_SATURATION <= _saturation(before))
    return None


def _excess(rgb: np.ndarray, c: int) -> float:
    """How far channel c stands above the mean of the other two."""
    return float(rgb[c] - (rgb.sum() - rgb[c]) / 2)


def _saturation(rgb: np.ndarray) -> float:
    return float((rgb.max() - rgb.min()) / max(rgb.mean(), 1.0))


# -- camera motion ------------------------------------------------------------------------------------
@dataclass
class CameraMotion:
    """How the view moved over a window (map units, degrees; +left)."""

    seconds: float
    yaw: float  # net turn, degrees, positive = to the left
    turning: float  # total turning either way, degrees
    forward: float  # distance along the view direction (negative: backwards)
    left: float  # distance sideways (negative: to the right)
    path: float  # total distance moved

    @property
    def turn(self) -> str:
        """'left', 'right', 'around' or '' (thresholds above)."""
        if abs(self.yaw) >= TURN_MIN_DEG and abs(self.yaw) >= TURN_NET_SHARE * self.turning:
            return "left" if self.yaw > 0 else "right"
        return "around" if self.turning >= LOOK_AROUND_DEG else ""

    @property
    def move(self) -> str:
        """'forward', 'backward', 'left', 'right', 'around' or '' (static)."""
        if self.path < MOVE_MIN_UNITS_PER_S * self.seconds or self.path == 0:
            return ""
        if max(abs(self.forward), abs(self.left)) < MOVE_DIR_SHARE * self.path:
            return "around"
        if abs(self.forward) >= abs(self.left):
            return "forward" if self.forward > 0 else "backward"
        return "left" if self.left > 0 else "right"


def camera_motion(angle: np.ndarray, x: np.ndarray, y: np.ndarray, fps: float) -> CameraMotion:
    """Sum the per-step turn and the per-step move, split along the view direction of the step
    before (forward) and across it (left); steps with a missing value are skipped."""
    angle, x, y = (np.asarray(a, np.float64) for a in (angle, x, y))
    d_yaw = (np.diff(angle) + 180.0) % 360.0 - 180.0  # wrapped into [-180, 180)
    dx, dy = np.diff(x), np.diff(y)
    heading = np.radians(angle[:-1])
    fwd = dx * np.cos(heading) + dy * np.sin(heading)
    side = -dx * np.sin(heading) + dy * np.cos(heading)
    ok = np.isfinite(d_yaw) & np.isfinite(fwd) & np.isfinite(side)
    d_yaw, fwd, side, step = d_yaw[ok], fwd[ok], side[ok], np.hypot(dx, dy)[ok]
    return CameraMotion(max(len(angle) - 1, 0) / fps, float(d_yaw.sum()), float(np.abs(d_yaw).sum()),
                        float(fwd.sum()), float(side.sum()), float(step.sum()))


def _camera_plain(m: CameraMotion) -> str:
    """'moves forward while turning left', 'stands still', ... (the player's view of it)."""
    turn = {"left": "turning left", "right": "turning right", "around": "looking around"}.get(m.turn, "")
    move = {"forward": "moves forward", "backward": "moves backward", "left": "strafes left",
            "right": "strafes right", "around": "moves around"}.get(m.move, "")
    if move and turn:
        return f"{move} while {turn}"
    if turn:
        return {"left": "turns left", "right": "turns right", "around": "looks around"}[m.turn] + " in place"
    return move or "stands still"


def _camera_terms(m: CameraMotion) -> str:
    """The camera-motion words of video datasets (GameGen-X annotates pans and zooms, §3.2)."""
    parts = []
    if m.turn in ("left", "right"):
        parts.append(f"pan {m.turn} {abs(m.yaw):.0f} deg")
    elif m.turn == "around":
        parts.append(f"pan left and right ({m.turning:.0f} deg in all)")
    if m.move in ("forward", "backward"):
        parts.append(f"dolly {'in' if m.move == 'forward' else 'out'} {abs(m.forward):.0f} units")
    elif m.move in ("left", "right"):
        parts.append(f"truck {m.move} {abs(m.left):.0f} units")
    elif m.move == "around":
        parts.append(f"wandering {m.path:.0f} units")
    return ", ".join(parts) or "static"


# -- reading a window ---------------------------------------------------------------------------------
@dataclass
class _Window:
    store: Store
    rec: EpisodeRecord
    start: int
    end: int
    actions: np.ndarray
    obs: Observed
    events: np.ndarray | None  # events[0:end] of the episode (lasting effects began before start)

    @property
    def fps(self) -> float:
        return self.store.spec.fps

    @property
    def seconds(self) -> float:
        return (self.end - self.start) / self.fps

    def var(self, name: str) -> np.ndarray | None:
        v = self.obs.variables.get(name)
        return v if v is not None and np.isfinite(v).any() else None


def _read(store: Store, rec: EpisodeRecord, start: int, end: int) -> _Window:
    if not 0 <= start < end <= rec.length:
        raise UserError(f"steps {start}..{end} are outside episode {rec.path} (0..{rec.length})",
                        f"pick 0 <= start < end <= {rec.length}")
    g = store.open_episode(rec)
    names = store.spec.variables
    table = np.asarray(g["game_variables"][start:end], np.float64).reshape(end - start, len(names))
    rgb = np.concatenate([mean_rgb(g["frames"][s:min(s + 256, end)]) for s in range(start, end, 256)])
    labels = read_labels(g, start, end)
    obs = Observed({n: table[:, j] for j, n in enumerate(names)}, rgb,
                   None if labels is None else {n: labels[1][:, j] for j, n in enumerate(labels[0])})
    return _Window(store, rec, start, end, np.asarray(g["actions"][start:end], np.int64), obs, read_events(g, 0, end))


# -- the facts every field draws on -------------------------------------------------------------------
def _split_camel(name: str) -> str:
    return " ".join(re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", name)).lower() or name


def _object(name: str) -> tuple[str, str]:
    """(English name, category) of a ViZDoom label."""
    if name in MONSTERS:
        return MONSTERS[name], "monster"
    if name in ITEMS:
        return ITEMS[name], "item"
    if name in EFFECTS:
        return EFFECTS[name], "effect"
    return _split_camel(name), "scenery"


def _seen_objects(w: _Window) -> dict[str, list[tuple[str, int, int]]]:
    """category -> [(English name, frames it is in view, most at once)], most seen first."""
    out: dict[str, list[tuple[str, int, int]]] = {c: [] for c in CATEGORY_ORDER}
    merged: dict[tuple[str, str], list[int]] = {}
    for name, counts in (w.obs.labels or {}).items():
        if counts.max(initial=0) > 0:
            key = _object(name)
            frames, most = merged.get(key, [0, 0])
            merged[key] = [max(frames, int((counts > 0).sum())), max(most, int(counts.max()))]
    for (english, category), (frames, most) in merged.items():
        out[category].append((english, frames, most))
    for items in out.values():
        items.sort(key=lambda e: (-e[1], e[0]))
    return out


def _object_list(entries: list[tuple[str, int, int]], limit: int) -> str:
    words = [f"{name} x{most}" if most > 1 else name for name, _, most in entries[:limit]]
    if len(entries) > limit:
        words.append(f"{len(entries) - limit} more")
    return ", ".join(words)


def _game(w: _Window) -> tuple[str, str, bool]:
    """(game, level, is DOOM) from the env id and the episode's title."""
    env_id = w.store.spec.env_id
    kind, _, target = env_id.partition(":")
    if kind == "vizdoom":
        family, _, name = target.partition("/")
        title = w.rec.meta.get("title")
        level = f"map {name}" + (f' "{title}"' if title else "")
        if family == "freedoom1":
            return "Freedoom: Phase 1", level, True
        if family == "freedoom2":
            return "Freedoom: Phase 2", level, True
        if family == "scenario":
            return "ViZDoom", f"scenario {name}", True
        return "ViZDoom", target, True
    if kind == "atari":
        return f"the Atari 2600 game {target}", "", False
    if kind == "toy":
        return f"the toy game {target}", "", False
    return f"the game {env_id}", "", False


def _brightness_word(b: float) -> str:
    return "dark" if b < 40 else "dim" if b < 80 else "moderately lit" if b < 140 else "bright"


def _tint_word(rgb: np.ndarray) -> str:
    if _saturation(rgb) < GREY_SATURATION:
        return "grey"
    for c, word in enumerate(("red", "green", "blue")):
        if _excess(rgb, c) >= TINT_DELTA * 2:
            return word
    return ""


def _action_shares(w: _Window) -> list[tuple[str, float]]:
    """(action name, share of steps), most pressed first; ties by action order."""
    names = w.store.spec.action_set.names
    counts = np.bincount(w.actions, minlength=len(names))
    order = sorted(range(len(names)), key=lambda i: (-counts[i], i))
    return [(names[i], counts[i] / len(w.actions)) for i in order if counts[i]]


def _presses(w: _Window, button: str, action: str) -> int:
    """Steps whose action presses ``button`` (or is named ``action`` where there are no buttons)."""
    spec = w.store.spec.action_set
    if button in spec.buttons:
        j = spec.buttons.index(button)
        pressed = [i for i, combo in enumerate(spec.combos) if combo[j]]
    else:
        pressed = [i for i, n in enumerate(spec.names) if n == action]
    return int(np.isin(w.actions, pressed).sum())


@dataclass
class _Event:
    at_s: float  # seconds from the clip's start
    event: GameEvent
    seen: bool | None


def _events(w: _Window) -> list[_Event] | None:
    """The events fired in the window, with whether their effect shows in it; None: not recorded.

    An event is the window's when the frame it was fired after and the first frame that can show
    it (the next one) are both in the window: steps start .. end - 2. One fired at the last step
    shows only after the window; one fired just before it shows from its first frame on, with no
    "before" in the window to tell it by."""
    if w.events is None:
        return None
    vocab, out = w.store.spec.events, []
    horizon = max(1, round(CONFIRM_S * w.fps))
    for t in np.nonzero(w.events[w.start:w.end - 1])[0]:
        ev = vocab[int(w.events[w.start + t])]
        out.append(_Event(t / w.fps, ev, effect_seen(ev.effect, int(t), w.obs, horizon)))
    return out


def _lasting_light(w: _Window) -> list[str]:
    """Lighting events fired before the clip whose effect still holds in it."""
    if w.events is None:
        return []
    vocab, out, renderer = w.store.spec.events, [], None
    for t in np.nonzero(w.events[:w.start])[0]:
        ev = vocab[int(w.events[t])]
        if ev.kind != "light":
            continue
        if ev.lasts_s is None:
            renderer = ev  # a renderer setting: the latest one holds
        elif (w.start - t) / w.fps < ev.lasts_s:
            out.append(ev.name.replace("_", " "))
    if renderer is not None:
        out.append(renderer.name.replace("_", " "))
    return sorted(set(out))


def _fmt(v: float) -> str:
    return f"{v:.0f}" if abs(v - round(v)) < 0.05 else f"{v:.1f}"


def _change(w: _Window, name: str) -> tuple[float, float] | None:
    v = w.var(name)
    if v is None:
        return None
    finite = v[np.isfinite(v)]
    return float(finite[0]), float(finite[-1])


def _from_to(pair: tuple[float, float]) -> str:
    a, b = pair
    return _fmt(a) if a == b else f"{_fmt(a)} -> {_fmt(b)}"


def _rise(w: _Window, name: str) -> float:
    pair = _change(w, name)
    return 0.0 if pair is None else pair[1] - pair[0]


def _ending(w: _Window, doom: bool) -> str:
    """How the episode ends, when the window reaches its last step (a cut by the recorder's time
    limit is not part of the game, so it goes unsaid)."""
    if w.end < w.rec.length or not w.rec.meta.get("terminated"):
        return ""
    # DOOM ends an episode at death or at the level's exit; the store keeps no frame after it
    return "the game ends the episode" + (" (death or level exit)" if doom else "")


# -- the fields ---------------------------------------------------------------------------------------
def caption(store: Store, record: EpisodeRecord, start: int, end: int) -> dict[str, str]:
    """The GEN and INS captions (GameGen-X §3.2) of steps ``start..end-1`` of one episode: a dict of
    the ten fields, GEN_FIELDS then INS_FIELDS, each a short English string."""
    w = _read(store, record, start, end)
    game, level, doom = _game(w)
    motion = None
    if all(w.var(v) is not None for v in ("ANGLE", "POSITION_X", "POSITION_Y")):
        motion = camera_motion(w.obs.variables["ANGLE"], w.obs.variables["POSITION_X"],
                               w.obs.variables["POSITION_Y"], w.fps)
    events = _events(w)
    objects = _seen_objects(w) if w.obs.labels is not None else None
    fields = {
        "Summary": _summary(w, game, level, doom, motion, events),
        "Game_Meta": _game_meta(w, game, level, doom),
        "Character": _character(w, doom),
        "Frame_Desc": _frame_desc(w, objects),
        "Atmosphere": _atmosphere(w, doom, objects),
        "Env": _env(w, game, level, objects),
        "Trans": _trans(w, events, doom),
        "Light": _light(w, events),
        "Act": _act(w, doom, motion),
        "Misc": _misc(w, motion),
    }
    return {name: text[0].upper() + text[1:] for name, text in fields.items()}


def _summary(w, game, level, doom, motion, events) -> str:
    where = f"{game}, {level}" if level else game
    view = "first-person " if doom else ""
    shares = _action_shares(w)
    if motion:
        what = f"the player {_camera_plain(motion)}, mostly pressing {shares[0][0]}"
    else:
        what = f"the player mostly presses {shares[0][0]}"
    if events:
        more = f" and {len(events) - 1} more event{'s' if len(events) > 2 else ''}" if len(events) > 1 else ""
        what += f"; {events[0].event.text}{more}"
    end = _ending(w, doom)
    seconds = f"{w.seconds:.1f}"
    article = "An" if seconds.startswith("8") or seconds.split(".")[0] in ("11", "18") else "A"
    return f"{article} {seconds}-second {view}clip of {where}: {what}" + (f"; {end}" if end else "") + "."


def _game_meta(w, game, level, doom) -> str:
    if game.startswith("Freedoom"):
        parts = [f"{game}, a free DOOM-compatible first-person shooter"]
    else:
        parts = [game + (", a first-person shooter on the DOOM engine" if doom else "")]
    if level:
        parts.append(level)
    version = w.rec.meta.get("game_version")
    if version:
        parts.append(version if " " in version else f"version {version}")
    parts[-1] += f", {w.store.spec.fps:g} frames per second"
    return "; ".join(parts) + "."


def _character(w, doom) -> str:
    if not doom:
        shown = [f"{n} {_from_to(_change(w, n))}" for n in w.store.spec.variables[:4] if w.var(n) is not None]
        return ("Game variables: " + ", ".join(shown) + ".") if shown else "No game variables were recorded."
    text = "First-person view of the player"
    weapon = _change(w, "SELECTED_WEAPON")
    if weapon:
        a, b = (f"the {DOOM_WEAPONS[int(v)]}" if int(v) in DOOM_WEAPONS else "no weapon" for v in weapon)
        text += (f", with {a}" if a == "no weapon" else f", holding {a}") if a == b else f", switching from {a} to {b}"
    stats = []
    # the fist (slot 1) has no ammunition, and no weapon (slot -1) reports -1
    ammo_shown = weapon is not None and max(weapon) >= 2
    for name, word in (("HEALTH", "health"), ("ARMOR", "armor"), ("SELECTED_WEAPON_AMMO", "ammo")):
        pair = _change(w, name)
        if pair and (word != "ammo" or ammo_shown):
            stats.append(f"{word} {_from_to(pair)}")
    return text + ("; " + ", ".join(stats) if stats else "") + "."


def _frame_desc(w, objects) -> str:
    b = w.obs.brightness
    light = f"Mean brightness {b.mean():.0f}/255 ({_brightness_word(b.mean())})."
    if objects is None:
        return light + " Objects in view were not recorded."
    parts = []
    for category, label, limit in (("monster", "monsters", 3), ("item", "items", 3), ("scenery", "scenery", 3),
                                   ("effect", "effects", 2)):
        if objects[category]:
            parts.append(f"{label}: {_object_list(objects[category], limit)}")
    seen = "In view: " + "; ".join(parts) + "." if parts else "No objects in view."
    return f"{seen} {light}"


def _atmosphere(w, doom, objects) -> str:
    b = w.obs.brightness.mean()
    tint = _tint_word(w.obs.rgb.mean(axis=0))
    light = f"{_brightness_word(b).capitalize()}{f', {tint}-tinted' if tint else ''} picture"
    if not doom:
        return light + "."
    threats = []
    if objects is not None and objects["monster"]:
        threats.append(f"{objects['monster'][0][0]} in view")
    lost = -_rise(w, "HEALTH")
    if lost > 0:
        threats.append(f"the player loses {_fmt(lost)} health")
    if threats:
        return f"{light}; tense: {' and '.join(threats)}."
    if objects is not None and _change(w, "HEALTH") is not None:
        return f"{light}; calm: no monsters in view and no damage taken."
    return light + "."


def _env(w, game, level, objects) -> str:
    where = f"{level[0].upper()}{level[1:]} of {game}" if level else game[0].upper() + game[1:]
    if objects is None:
        return where + "."
    around = objects["item"] + objects["scenery"]
    around.sort(key=lambda e: (-e[1], e[0]))
    return where + (f"; around the player: {_object_list(around, 4)}." if around else "; no items or scenery in view.")


def _trans(w, events, doom) -> str:
    parts = []
    if events is None:
        parts.append("In-game events were not recorded")
    elif not events:
        parts.append("No in-game event")
    for e in (events or [])[:3]:
        seen = {True: "", False: " (no effect visible)", None: ""}[e.seen]
        parts.append(f"at {e.at_s:.1f} s {e.event.text}{seen}")
    if events and len(events) > 3:
        parts.append(f"{len(events) - 3} more event(s) follow")
    end = _ending(w, doom)
    if end:
        parts.append(f"at the end {end}")
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def fired_events(trans: str, vocabulary: tuple[GameEvent, ...]) -> list[tuple[GameEvent, float]]:
    """The events a Trans field (as ``_trans`` words it) says fired with their effect shown, with when
    (seconds from the clip's start), in the field's order. Only the first three are named there."""
    out = []
    for ev in vocabulary:
        if not ev.text:
            continue
        for m in re.finditer(rf"\b[Aa]t (\d+(?:\.\d+)?) s {re.escape(ev.text)}(?! \(no effect visible\))", trans):
            out.append((m.start(), ev, float(m.group(1))))
    return [(ev, at) for _, ev, at in sorted(out, key=lambda e: e[0])]


def _light(w, events) -> str:
    b, rgb = w.obs.brightness, w.obs.rgb
    first, last = b[0], b[-1]
    text = f"Brightness {first:.0f}/255 ({_brightness_word(first)}) at the start"
    text += f", {last:.0f}/255 ({_brightness_word(last)}) at the end" if abs(last - first) >= LIGHT_DELTA else ", steady"
    tint = _tint_word(rgb[-1])
    if tint:
        text += f"; {tint}-tinted view at the end"
    changes = [f"{e.event.name.replace('_', ' ')} at {e.at_s:.1f} s" for e in events or ()
               if e.event.kind == "light" and e.seen is not False]
    if changes:
        text += "; lighting events: " + ", ".join(changes[:3])
    lasting = _lasting_light(w)
    if lasting:
        text += "; still in effect from earlier: " + ", ".join(lasting)
    return text + "."


def _act(w, doom, motion) -> str:
    parts = []
    if motion:
        move = {"forward": f"walks forward {abs(motion.forward):.0f} map units",
                "backward": f"walks backward {abs(motion.forward):.0f} map units",
                "left": f"strafes left {abs(motion.left):.0f} map units",
                "right": f"strafes right {abs(motion.left):.0f} map units",
                "around": f"moves around ({motion.path:.0f} map units)"}.get(motion.move, "stays in place")
        turn = {"left": f"turns left {abs(motion.yaw):.0f} deg", "right": f"turns right {abs(motion.yaw):.0f} deg",
                "around": f"looks left and right ({motion.turning:.0f} deg)"}.get(motion.turn, "")
        parts.append(move + (f" and {turn}" if turn else ""))
    if doom:
        for button, action, verb in (("ATTACK", "ATTACK", "fires"), ("USE", "USE", "presses use")):
            n = _presses(w, button, action)
            if n:
                parts.append(f"{verb} on {n} of {len(w.actions)} steps")
        for name, verb in (("KILLCOUNT", "kills {} monster(s)"), ("ITEMCOUNT", "picks up {} item(s)"),
                           ("DAMAGE_TAKEN", "takes {} damage")):
            rise = _rise(w, name)
            if rise > 0:
                parts.append(verb.format(_fmt(rise)))
    else:
        parts.append(f"presses {_action_shares(w)[0][0]} most")
    return "The player " + ", ".join(parts) + "."


def _misc(w, motion) -> str:
    shares = _action_shares(w)
    keys = ", ".join(f"{name} {share:.0%}" for name, share in shares[:4])
    text = f"Keys: {keys} (dominant: {shares[0][0]})."
    if motion:
        text += f" Camera: {_camera_terms(motion)}."
    else:
        text += " Camera motion was not recorded."
    return text


# -- requests: what an eval or a player asks InstructNet for, worded as a recorded clip's INS caption -----
# For an action or button held alone: the Act field's verb (_act's) and the Misc field's camera words
# (_camera_terms's), without the distances they measure. A combo ("FORWARD+TURN_LEFT") joins its parts.
KEY_WORDS = {"TURN_LEFT": ("turns left", "pan left"), "TURN_RIGHT": ("turns right", "pan right"),
             "FORWARD": ("walks forward", "dolly in"), "BACKWARD": ("walks backward", "dolly out"),
             "STRAFE_LEFT": ("strafes left", "truck left"), "STRAFE_RIGHT": ("strafes right", "truck right"),
             "MOVE_FORWARD": ("walks forward", "dolly in"), "MOVE_BACKWARD": ("walks backward", "dolly out"),
             "MOVE_LEFT": ("strafes left", "truck left"), "MOVE_RIGHT": ("strafes right", "truck right"),
             "NOOP": ("stays in place", "static")}


def _key_words(key: str) -> tuple[str, str]:
    """(act, camera) for an action name or "+"-joined buttons; ("presses KEY", "") for unknown keys."""
    parts = [KEY_WORDS.get(k) for k in key.split("+")]
    if not all(parts):
        return f"presses {key}", ""
    cameras = sorted((c for _, c in parts), key=lambda c: not c.startswith("pan"))  # _camera_terms: pan first
    return " and ".join(a for a, _ in parts), ", ".join(cameras)


def key_request(key: str) -> str:
    """The Act and Misc fields of a clip where ``key`` (an action name, or buttons joined by "+") is held
    throughout: the instruction for a key alone."""
    act, _ = _key_words(key)
    return f"Act: The player {act}. Misc: Keys: {key} 100% (dominant: {key})."


def _fired_at_start(event: GameEvent) -> tuple[str, str]:
    """(the Trans field, the Light field's lighting-event clause or "") of a clip where ``event`` fires at
    0.1 s, as _trans and _light word them."""
    light = f"lighting events: {event.name.replace('_', ' ')} at 0.1 s" if event.kind == "light" else ""
    return f"At 0.1 s {event.text}.", light


def event_request(event: GameEvent) -> str:
    """The Trans (and, for lighting, Light) field of a clip where ``event`` fires at its start: the
    instruction for an event alone."""
    trans, light = _fired_at_start(event)
    return f"Trans: {trans}" + (f" Light: {light}." if light else "")


def request_instruction(context: dict[str, str], brightness: float, key: str, event: GameEvent | None = None) -> str:
    """All five INS fields for a request made at the end of a context window: Env as the context's
    (``caption``'s fields), ``event`` fired at 0.1 s (or none), the picture's ``brightness`` (0-255)
    at the request, ``key`` held throughout (as key_request). InstructNet trains on all five (§3.2's
    INS caption); a request of one or two of them is off that distribution."""
    act, camera = _key_words(key)
    trans, fired = _fired_at_start(event) if event is not None else ("No in-game event.", "")
    light = f"Brightness {brightness:.0f}/255 ({_brightness_word(brightness)}) at the start"
    light += f"; {fired}." if fired else ", steady."
    misc = f"Keys: {key} 100% (dominant: {key})."
    recorded = "Camera motion was not recorded" not in context["Misc"]
    misc += f" Camera: {camera}." if recorded and camera else " Camera motion was not recorded."
    return instruction_text({"Env": context["Env"], "Trans": trans, "Light": light, "Act": f"The player {act}.",
                             "Misc": misc})


# -- texts for the text encoder -----------------------------------------------------------------------
def caption_text(fields: dict[str, str]) -> str:
    """The GEN caption as one string, "Summary: ... Game_Meta: ... Atmosphere: ..."."""
    return _join(fields, GEN_FIELDS)


def instruction_text(fields: dict[str, str]) -> str:
    """The INS caption as one string, "Env: ... Trans: ... Misc: ..."."""
    return _join(fields, INS_FIELDS)


def _join(fields: dict[str, str], names: tuple[str, ...]) -> str:
    text = " ".join(f"{name}: {fields[name]}" for name in names if fields.get(name))
    words = text.split()
    if len(words) > MAX_WORDS:  # a guard only: the templates stay far below (tests check)
        text = " ".join(words[:MAX_WORDS])
    while estimate_tokens(text) > MAX_TOKENS:
        text = text.rsplit(" ", 1)[0]
    return text


def estimate_tokens(text: str) -> int:
    """An over-estimate of T5's SentencePiece token count: each run of letters counts one token per
    started 5 letters (T5 keeps most English words whole; rare ones split into pieces), each digit
    and each punctuation mark one token, plus the end-of-text token."""
    n = 1
    for piece in re.findall(r"[A-Za-z]+|\d|[^\sA-Za-z\d]", text):
        n += math.ceil(len(piece) / 5) if piece[0].isalpha() else 1
    return n


def word_count(text: str) -> int:
    return len(text.split())
