"""A tiny deterministic game for tests: the action alone decides the next frame.

A white cursor moves on a G x G grid (wrapping at the edges) over a fixed coloured board. Reaching
the red goal cell gives reward 1 and ends the episode; after ``max_steps`` the episode is truncated.
Because the next frame is a pure function of (cursor, goal, action), a test can read the cursor
position back from any frame and check that ``frames[t+1]`` is the result of ``actions[t]``.
"""

from __future__ import annotations

import numpy as np

from ..errors import UserError
from .base import ActionSet, EnvConfig, Step

MOVES = {"NOOP": (0, 0), "UP": (0, -1), "DOWN": (0, 1), "LEFT": (-1, 0), "RIGHT": (1, 0)}
GOAL_COLOR = (220, 30, 30)
CURSOR_COLOR = (255, 255, 255)


class ToyEnv:
    def __init__(self, name: str, config: EnvConfig, grid: int = 8, max_steps: int = 200):
        if name != "cursor":
            raise UserError(f"unknown toy game 'toy:{name}'", "use toy:cursor")
        if config.height < grid or config.width < grid:
            raise UserError(f"toy:cursor needs at least {grid}x{grid} pixels", "raise --resolution")
        self.env_id = f"toy:{name}"
        self.config = config
        self.grid = grid
        self.max_steps = max_steps
        self.action_set = ActionSet(tuple(MOVES))
        self.variable_names = ("cursor_x", "cursor_y")
        self.image_names = ()
        self.fps = 30.0 / config.frame_skip
        self.game_version = "1"
        # board colour of each cell: a gradient, so every position looks different
        gx, gy = np.meshgrid(np.arange(grid), np.arange(grid))
        self._board = np.stack([40 + 20 * gx, 40 + 20 * gy, 90 + 0 * gx], -1).astype(np.uint8)  # (G, G, 3)
        self._rows = (np.arange(config.height) * grid) // config.height  # pixel row -> cell row
        self._cols = (np.arange(config.width) * grid) // config.width
        self._pos = (0, 0)
        self._goal = (0, 0)
        self._t = 0

    def cell_of(self, frame: np.ndarray) -> tuple[int, int]:
        """Read the cursor's cell back from a frame (used by the time-indexing test)."""
        ys, xs = np.nonzero((frame == CURSOR_COLOR).all(-1))
        return int(self._cols[xs[0]]), int(self._rows[ys[0]])

    def _render(self) -> np.ndarray:
        cells = self._board.copy()
        cells[self._goal[1], self._goal[0]] = GOAL_COLOR
        cells[self._pos[1], self._pos[0]] = CURSOR_COLOR
        return cells[self._rows][:, self._cols]  # (H, W, 3) nearest-cell upscale

    def _obs(self, reward=0.0, terminated=False, truncated=False) -> Step:
        return Step(self._render(), reward, terminated, truncated,
                    {"cursor_x": float(self._pos[0]), "cursor_y": float(self._pos[1])})

    def reset(self, seed: int) -> Step:
        rng = np.random.default_rng(seed)
        cells = rng.choice(self.grid * self.grid, size=2, replace=False)
        self._pos = (int(cells[0] % self.grid), int(cells[0] // self.grid))
        self._goal = (int(cells[1] % self.grid), int(cells[1] // self.grid))
        self._t = 0
        return self._obs()

    def step(self, action: int) -> Step:
        dx, dy = MOVES[self.action_set.names[action]]
        for _ in range(self.config.frame_skip):
            self._pos = ((self._pos[0] + dx) % self.grid, (self._pos[1] + dy) % self.grid)
        self._t += 1
        reached = self._pos == self._goal
        return self._obs(float(reached), reached, self._t >= self.max_steps and not reached)

    def close(self) -> None:
        pass
