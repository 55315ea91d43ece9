"""The one small protocol every game adapter follows.

An adapter turns a real game into: uint8 RGB frames at a configured resolution, a discrete set of
named actions (button combinations), a dict of game variables, and per-episode seeding.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

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

    def __post_init__(self):
        if self.height < 8 or self.width < 8:
            raise UserError(f"resolution {self.width}x{self.height} is too small", "use at least 8x8, e.g. 160x120")
        if self.frame_skip < 1:
            raise UserError(f"frame_skip must be >= 1, got {self.frame_skip}", "pass --frame-skip 1 or more")


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


@dataclass
class Step:
    """What the game shows after reset or after one action.

    ``frame`` is None only when the game gives no picture after the final action (ViZDoom).
    ``images`` holds extra pictures such as the automap.
    """

    frame: np.ndarray | None  # (H, W, 3) uint8
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    variables: dict[str, float] = field(default_factory=dict)
    images: dict[str, np.ndarray] = field(default_factory=dict)


class GameEnv(Protocol):
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
