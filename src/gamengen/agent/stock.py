"""The textbook SB3 setup on a DOOM map, used only by `gamengen bench agent` as the baseline.

The screen alone as an (H, W, 3) image, the game's own reward, each action held ``hold`` frames:
no automap, no action history, no shaped reward, no recording (compare `agent/env.py`).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from ..envs import EnvConfig, make_env


class StockDoomEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, env_id: str, hold: int = 4, max_frames: int = 2048):
        self.game = make_env(env_id, EnvConfig())
        self.hold, self.max_frames = hold, max_frames
        h, w = self.game.config.height, self.game.config.width
        self.observation_space = gym.spaces.Box(0, 255, (h, w, 3), np.uint8)
        self.action_space = gym.spaces.Discrete(len(self.game.action_set))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.frames = 0
        step = self.game.reset(int(self.np_random.integers(2**31)))
        return step.frame, {}

    def step(self, action):
        reward = 0.0
        for _ in range(self.hold):
            s = self.game.step(int(action))
            self.frames += 1
            reward += s.reward
            if s.terminated or s.truncated or self.frames >= self.max_frames:
                break
        frame = s.frame if s.frame is not None else np.zeros(self.observation_space.shape, np.uint8)
        return frame, reward, bool(s.terminated), bool(s.truncated or self.frames >= self.max_frames), {}

    def close(self):
        self.game.close()
