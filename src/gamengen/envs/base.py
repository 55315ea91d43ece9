"""The one small protocol every game adapter follows.

An adapter turns a real game into: uint8 RGB frames at a configured resolution, a discrete set of
named actions (button combinations), a dict of game variables, and per-episode seeding. ViZDoom
also reports the objects in view (labels) and can fire in-game events on a seeded schedule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Protocol

import numpy as np

from ..errors import UserError


@dataclass
class EnvConfig:
    """Settings shared by all adapters. 160x120 is the project default; 320x240 the paper's."""

    height: int = 120
    width: int = 160
    # Game tics advanced per env step. 1 keeps DOOM's native 35 steps/s, close to the paper's
    # 20 FPS simulation and our >=30 FPS play target; the agent repeats actions on top (§4).
    frame_skip: int = 1
    # ViZDoom only: also render the automap (the PPO agent's second input, paper App. A.3).
    automap: bool = False
    # ViZDoom only: report which object types are in view on every frame (Step.labels).
    labels: bool = False
    # ViZDoom only: fire in-game events (monsters, items, weapons, lighting) on a schedule drawn
    # from the episode's seed, as GameGen-X's local recordings change in-game events every
    # 5-10 s (§3.2, OGameData). ``event_period_s`` is that gap in seconds of game time; the CLI
    # defaults to the paper's 5-10 s (`record --event-period`); tests shorten it so short recordings
    # hold several events.
    events: bool = False
    event_period_s: tuple[float, float] = (5.0, 10.0)
    # The event kinds the schedule draws from, by name (empty: the game's whole vocabulary). Ours: a
    # recording of only the events that recolour the view gives each of them many clips, where the
    # whole vocabulary leaves 13-19 clips to each (docs/gamegen_x.md, "Recordings of picture events").
    event_kinds: tuple[str, ...] = ()
    # Seconds before each event at which every lasting picture effect ends (ViZDoom: the powerups
    # are taken, the light fall-off restored), so every event fires on an unaltered view; None: they
    # last their own time. Ours: with events every 2-4 s, half of the picture events fired on a view
    # an earlier powerup still tinted, and the picture showed 44% of those against 86% of the others
    # (docs/gamegen_x.md, "Clean event transitions").
    event_clear_s: float | None = None

    def __post_init__(self):
        if self.height < 8 or self.width < 8:
            raise UserError(f"resolution {self.width}x{self.height} is too small", "use at least 8x8, e.g. 160x120")
        if self.frame_skip < 1:
            raise UserError(f"frame_skip must be >= 1, got {self.frame_skip}", "pass --frame-skip 1 or more")
        period = tuple(float(v) for v in self.event_period_s)
        if len(period) != 2 or not 0 < period[0] <= period[1]:
            raise UserError(f"event period {self.event_period_s} is not a (shortest, longest) gap in seconds",
                            "e.g. event_period_s=(5.0, 10.0)")
        self.event_period_s = period
        self.event_kinds = tuple(str(k) for k in self.event_kinds)
        if self.event_kinds and not self.events:
            raise UserError("event kinds are given with events off", "turn events on (--events)")
        if self.event_clear_s is not None:
            self.event_clear_s = float(self.event_clear_s)
            if not self.events:
                raise UserError("an event clearing time is given with events off", "turn events on (--events)")
            if not 0 < self.event_clear_s < self.event_period_s[0]:
                raise UserError(f"event clearing {self.event_clear_s:g} s before each event",
                                f"use a time above 0 and under the shortest gap between events ({self.event_period_s[0]:g} s)")


@dataclass(frozen=True)
class ActionSet:
    """Named discrete actions. Where the game has buttons, each action is a combination of them."""

    names: tuple[str, ...]
    buttons: tuple[str, ...] = ()
    # combos[i][j] == 1 when action i presses buttons[j]
    combos: tuple[tuple[int, ...], ...] = ()

    def __len__(self) -> int:
        return len(self.names)

    def to_json(self) -> dict:
        return {"names": list(self.names), "buttons": list(self.buttons), "combos": [list(c) for c in self.combos]}

    @classmethod
    def from_json(cls, d: dict) -> "ActionSet":
        return cls(tuple(d["names"]), tuple(d.get("buttons", ())), tuple(tuple(c) for c in d.get("combos", ())))


@dataclass(frozen=True)
class GameEvent:
    """One entry of a game's fixed event vocabulary: console commands the game runs as one event.

    ``effect`` says how the event shows in recorded data, so captions can tell an event that took
    effect from one that did not (a summon into a wall, a give that a scenario's script undoes):
    ``label:<object name>`` (that object comes into view), ``var:<NAME>>`` (the game variable
    rises), ``var:<NAME>=<v>`` (it becomes v), ``light>``/``light<`` (the picture gets brighter or
    darker), ``tint:red``/``tint:green``/``tint:grey``. ``lasts_s`` is how long a lighting effect
    stays (None: until the episode ends or another lighting event of the same kind replaces it).
    """

    name: str
    commands: tuple[str, ...] = ()
    kind: str = "none"  # none, monster, object, item, weapon, light
    text: str = ""  # what happens, as a caption phrase
    effect: str = ""
    lasts_s: float | None = None

    def to_json(self) -> dict:
        return {"name": self.name, "commands": list(self.commands), "kind": self.kind, "text": self.text,
                "effect": self.effect, "lasts_s": self.lasts_s}

    @classmethod
    def from_json(cls, d: dict) -> "GameEvent":
        lasts = d.get("lasts_s")
        return cls(str(d["name"]), tuple(d.get("commands", ())), str(d.get("kind", "none")), str(d.get("text", "")),
                   str(d.get("effect", "")), None if lasts is None else float(lasts))


NO_EVENT = GameEvent("none", text="nothing happens")
EVENT_STREAM = 0x65766E74  # "evnt": keeps the event draws apart from every other use of an episode seed


def event_schedule(seed: int, fps: float, period_s: tuple[float, float], n_events: int) -> Iterator[tuple[int, int]]:
    """The events of one episode, in order, as (step, k): event k (1..n_events) is fired at step t.

    A pure function of the episode's env seed, its steps per second and the period: gaps are drawn
    uniformly in ``period_s`` seconds of game time and the event uniformly from the vocabulary, so
    an episode replays from its env seed and actions with its events. Step t's event is sent just
    before ``actions[t]`` runs (docs/dataset.md, time indexing). Never two on one step; never step 0.
    """
    rng = np.random.default_rng(np.random.SeedSequence([int(seed) % 2**63, EVENT_STREAM]))
    at_s, last = 0.0, 0
    while True:
        at_s += float(rng.uniform(*period_s))
        k = 1 + int(rng.integers(n_events))
        last = max(last + 1, round(at_s * fps))
        yield last, k


def event_array(seed: int, steps: int, fps: float, period_s: tuple[float, float], n_events: int) -> np.ndarray:
    """The `events` array an episode of ``steps`` steps records: (steps,) int16, 0 = no event."""
    out = np.zeros(steps, np.int16)
    for t, k in event_schedule(seed, fps, period_s, n_events):
        if t >= steps:
            return out
        out[t] = k


@dataclass
class Step:
    """What the game shows after reset or after one action.

    ``frame`` is None only when the game gives no picture after the final action (ViZDoom).
    ``images`` holds extra pictures such as the automap. ``labels`` counts the objects in view by
    type (ViZDoom with EnvConfig.labels; the player itself excluded). ``event`` is the event fired
    together with the action that led here (0: none), like ``reward`` the outcome of that action.
    """

    frame: np.ndarray | None  # (H, W, 3) uint8
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    variables: dict[str, float] = field(default_factory=dict)
    images: dict[str, np.ndarray] = field(default_factory=dict)
    labels: dict[str, int] = field(default_factory=dict)
    event: int = 0


class GameEnv(Protocol):
    """A real game. Adapters may also have ``events`` (their event vocabulary, NO_EVENT first,
    empty when events are off), ``has_labels`` (Step.labels is filled) and ``title`` (the level's
    name); readers use getattr for these, so adapters without them need no change."""

    env_id: str
    config: EnvConfig
    action_set: ActionSet
    variable_names: tuple[str, ...]
    image_names: tuple[str, ...]
    fps: float  # env steps per second of game time
    game_version: str

    def reset(self, seed: int) -> Step: ...

    def step(self, action: int) -> Step: ...

    def close(self) -> None: ...


def resize_frame(frame: np.ndarray, height: int, width: int) -> np.ndarray:
    """Area-resample an RGB frame to (height, width) when it differs."""
    if frame.shape[0] == height and frame.shape[1] == width:
        return np.ascontiguousarray(frame)
    from PIL import Image

    return np.asarray(Image.fromarray(frame).resize((width, height), Image.Resampling.BOX))
