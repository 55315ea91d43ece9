"""What one player plays: the learned game, the real game, or both in lockstep (ghost mode).

Every kind has the same small surface, `PlayableGame`, so the server and the window never need to
know which kind they drive.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ..envs import EnvConfig, make_env

if TYPE_CHECKING:  # the model folder's module loads torch, which the real game alone does not need
    from ..models.world_model import Start


class PlayableGame(Protocol):
    """What the server and the window use of a game."""

    views: tuple[str, ...]  # names of the pictures it shows, in the order it shows them

    # read-only properties, so a game may compute them (GhostGame asks its real game)
    @property
    def timings(self) -> dict[str, float]:
        """ms per stage of the last step, for the HUD."""

    @property
    def ended(self) -> bool:
        """The real game's episode is over; its last frame stays on screen until a reset."""

    @property
    def diverged(self) -> bool:
        """The real game's replay of a start did not reach the start's recorded frame."""

    def reset(self, start: int) -> dict[str, np.ndarray]: ...

    def step(self, action: int) -> dict[str, np.ndarray]: ...

    def close(self) -> None: ...


class NeuralGame:
    """The learned game: every frame comes from the world model (no game code runs)."""

    views = ("model",)

    def __init__(self, world, starts: list[Start]):
        self.world, self.starts = world.for_player(), starts
        self.timings: dict[str, float] = {}
        self.ended = self.diverged = False  # the learned game neither ends nor replays anything

    def reset(self, start: int) -> dict[str, np.ndarray]:
        s = self.starts[start]
        return {"model": self.world.reset(s.frames, s.actions, seed=start)}

    def step(self, action: int) -> dict[str, np.ndarray]:
        frame = self.world.step(action)
        self.timings = dict(self.world.timings)
        return {"model": frame}

    def close(self) -> None:
        pass


class RealGame:
    """The real game on the same keys. With ``starts`` it first replays a start's recorded actions
    from its env seed (ViZDoom is deterministic given both) so it stands where the model starts.
    With a ``recording`` (human play) every step goes into the trajectory store."""

    views = ("real",)

    def __init__(self, env_id: str, height: int, width: int, starts: list[Start] | None = None, recording=None,
                 frame_skip: int = 1):
        # the model's frame skip: one neural step is this many game tics (docs/world_model.md)
        self.env = make_env(env_id, EnvConfig(height=height, width=width, frame_skip=frame_skip))
        self.starts, self.recording = starts, recording
        self.obs = None
        self.ended = False  # the episode is over; its last frame stays on screen until a reset
        self.diverged = False  # a replayed start did not reach the recorded frame
        self.timings: dict[str, float] = {}

    def reset(self, start: int) -> dict[str, np.ndarray]:
        self.ended = self.diverged = False
        if self.recording is not None:  # human play: every reset is a new recorded episode
            self.obs = self.env.reset(self.recording.begin())
            return {"real": self.obs.frame}
        s = self.starts[start]
        self.obs = self.env.reset(int(s.env_seed or 0))
        for a in s.prefix:
            nxt = self.env.step(int(a))
            if nxt.frame is None:
                self.ended = True
                break
            self.obs = nxt
        self.diverged = self.ended or not np.array_equal(self.obs.frame, s.frames[-1])
        return {"real": self.obs.frame}

    def step(self, action: int) -> dict[str, np.ndarray]:
        t0 = time.perf_counter()
        if not self.ended:
            nxt = self.env.step(int(action))
            if self.recording is not None:
                self.recording.add(self.obs, int(action), nxt)
            self.ended = nxt.frame is None or nxt.terminated or nxt.truncated
            if self.ended and self.recording is not None:
                self.recording.end()
            if nxt.frame is not None:
                self.obs = nxt
        self.timings = {"game": (time.perf_counter() - t0) * 1e3}
        return {"real": self.obs.frame}

    def close(self) -> None:
        if self.recording is not None:
            self.recording.end()
        self.env.close()


class GhostGame:
    """Ghost mode: the learned game beside the real one, stepped with the same action."""

    views = ("model", "real")

    def __init__(self, neural: NeuralGame, real: RealGame):
        self.neural, self.real = neural, real
        self.timings: dict[str, float] = {}

    @property
    def ended(self) -> bool:
        return self.real.ended

    @property
    def diverged(self) -> bool:
        return self.real.diverged

    def reset(self, start: int) -> dict[str, np.ndarray]:
        return {**self.neural.reset(start), **self.real.reset(start)}

    def step(self, action: int) -> dict[str, np.ndarray]:
        out = {**self.neural.step(action), **self.real.step(action)}
        self.timings = {**self.neural.timings, **self.real.timings}
        return out

    def close(self) -> None:
        self.neural.close()
        self.real.close()
