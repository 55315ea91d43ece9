"""The PPO agent's view of DOOM (paper §4.1, App. A.3), recording every game frame it plays.

One agent step ("decision") holds an action for ``hold`` game frames. Each of those frames goes into
the trajectory store with the action that followed it, exactly as `gamengen record` stores random
play, so the world model sees agent and random data in one format (docs/dataset.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np

from ..data.store import ShardWriter, Store
from ..envs import EnvConfig, make_env
from ..envs.base import Step
from ..errors import UserError
from .reward import NEEDED, RewardConfig, ShapedReward


@dataclass
class AgentEnvConfig:
    env_id: str = "vizdoom:freedoom1/E1M1"
    hold: int = 4  # game frames per decision (paper §4.1: actions repeat for 4 frames)
    # Sticky actions: at a decision the previous action is kept with this probability, whatever the
    # agent chose, so play has the longer key presses of a human (paper §4.1; Machado et al. 2018).
    repeat_prob: float = 0.25
    history: int = 32  # past decisions the agent sees (paper §4.1)
    # The automap is max-pooled by this factor before the agent sees it (1 = the paper's 160x120).
    # It is thin lines on black, which 2x2 max-pooling keeps; at 80x60 its CNN costs a quarter, and
    # the PPO update (10 epochs of forward+backward through both CNNs) is most of the training
    # time: 1.46x more samples/s at batch 64 (docs/agent.md, "Speed").
    automap_pool: int = 2
    max_episode_frames: int = 2048  # episodes are cut (truncated) here: ~58 s of DOOM
    seed: int = 0
    reward: RewardConfig = field(default_factory=RewardConfig)
    # Weight of the game's own reward, added to the shaped one: a ViZDoom scenario's goal (basic:
    # +101 for the kill, -1 a tic) at about the scale of the paper's +1,000 per kill; Freedoom maps give 0.
    game_reward: float = 10.0


def to_observation(step: Step, history: np.ndarray, automap_pool: int = 1) -> dict[str, np.ndarray]:
    """Channel-first frame, one-channel automap (its lines are all the agent needs), past actions."""
    automap = step.images["automap"].max(axis=2, keepdims=True)
    if automap_pool > 1:
        h, w, k = automap.shape[0] // automap_pool, automap.shape[1] // automap_pool, automap_pool
        automap = automap[:h * k, :w * k].reshape(h, k, w, k, 1).max(axis=(1, 3))
    return {"frame": step.frame.transpose(2, 0, 1).copy(), "automap": automap.transpose(2, 0, 1).copy(),
            "actions": history.copy()}


def observation_space(height: int, width: int, n_actions: int, history: int, automap_pool: int = 1) -> gym.spaces.Dict:
    return gym.spaces.Dict({
        "frame": gym.spaces.Box(0, 255, (3, height, width), np.uint8),
        "automap": gym.spaces.Box(0, 255, (1, height // automap_pool, width // automap_pool), np.uint8),
        # n_actions means "no action yet" at the start of an episode
        "actions": gym.spaces.MultiDiscrete([n_actions + 1] * history),
    })


class DoomAgentEnv(gym.Env):
    """gymnasium env over a game adapter with automap, shaped reward and optional recording.

    ``index`` numbers this env among the parallel games; with a ``store`` it writes shard
    ``agent-<phase>-<index>``. ``training_step`` is set by the learner before each rollout and is
    stored with every episode, so the data can be split by the agent's skill later.
    """

    metadata = {"render_modes": []}

    def __init__(self, config: AgentEnvConfig, index: int = 0, store: str | None = None, phase: str = "train"):
        self.config, self.index, self.phase = config, index, phase
        self.game = make_env(config.env_id, EnvConfig(automap=True))
        missing = [v for v in NEEDED if v not in self.game.variable_names]
        if missing or "automap" not in self.game.image_names:
            self.game.close()
            raise UserError(f"{config.env_id} lacks what the agent needs (automap, game variables {missing})",
                            "train the agent on a Freedoom map, e.g. --env vizdoom:freedoom1/E1M1")
        self.n = len(self.game.action_set)
        self.reward_fn = ShapedReward(config.reward)
        self.action_space = gym.spaces.Discrete(self.n)
        self.observation_space = observation_space(self.game.config.height, self.game.config.width, self.n,
                                                   config.history, config.automap_pool)
        self.training_step = 0
        self.shard = None
        if store is not None:
            from ..data.store import spec_of

            st = Store.create_or_open(store, spec_of(self.game, images=()))
            self.shard = ShardWriter(st, f"agent-{phase}-{index}",
                                     {"policy": "agent", "phase": phase, "env_index": index, "seed": config.seed})
        self.episode = len(self.shard.records) if self.shard else 0
        self.writer = None

    def set_training_step(self, frames: int) -> None:
        self.training_step = int(frames)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.writer is not None:  # an episode cut short by a reset is dropped, as after a crash,
            self.writer.abandon()  # and its number is used again
            self.writer = None
            self.episode -= 1
        env_seed, rng_seed = np.random.SeedSequence([self.config.seed, self.index, self.episode,
                                                     0 if self.phase == "train" else 1]).generate_state(2)
        self.rng = np.random.default_rng(int(rng_seed))
        self.step_obs = self.game.reset(int(env_seed))
        self.reward_fn.reset(self.step_obs.variables)
        self.history = np.full(self.config.history, self.n, np.int64)
        self.prev_action = None
        self.frames = 0
        self.shaped_return = 0.0
        if self.shard is not None:
            self.writer = self.shard.begin(f"e{self.episode:06d}", {
                "policy": "agent", "phase": self.phase, "env_index": self.index, "episode_index": self.episode,
                "env_seed": int(env_seed), "training_step": int(self.training_step),
                "game_version": self.game.game_version})
        self.episode += 1
        return to_observation(self.step_obs, self.history, self.config.automap_pool), {}

    def step(self, action):
        cfg = self.config
        action = int(action)
        if self.prev_action is not None and self.rng.random() < cfg.repeat_prob:
            action = self.prev_action
        self.prev_action = action
        self.history = np.roll(self.history, -1)
        self.history[-1] = action
        reward, done, cut = 0.0, False, False
        for _ in range(cfg.hold):
            cur = self.step_obs
            nxt = self.game.step(action)
            self.frames += 1
            done = nxt.terminated or nxt.truncated
            cut = not done and self.frames >= cfg.max_episode_frames
            if self.writer is not None:
                self.writer.add(cur.frame, action, nxt.reward, nxt.terminated, nxt.truncated or cut, cur.variables)
            # the shaped reward of App. A.3, plus the game's own (a scenario's goal; 0 on Freedoom maps)
            reward += self.reward_fn.step(nxt.variables) + cfg.game_reward * nxt.reward
            self.step_obs = nxt
            if done or cut:
                break
        self.shaped_return += reward
        info = {}
        if done or cut:
            info["episode_stats"] = self.finish_episode()
        if self.step_obs.frame is None:  # the game shows nothing after the last action; SB3 ignores it
            obs = {k: np.zeros(s.shape, s.dtype) for k, s in self.observation_space.spaces.items()}
        else:
            obs = to_observation(self.step_obs, self.history, self.config.automap_pool)
        return obs, reward, bool(self.step_obs.terminated), bool(cut or self.step_obs.truncated), info

    def finish_episode(self) -> dict:
        stats = {"shaped_return": self.shaped_return, "kills": self.reward_fn.kills,
                 "coverage": self.reward_fn.coverage, "frames": self.frames, "training_step": self.training_step}
        if self.writer is not None:
            self.writer.meta.update({k: v for k, v in stats.items() if k != "training_step"},
                                    training_step_end=int(self.training_step))
            self.writer.finish()
            self.writer = None
        return stats

    def close(self):
        if self.writer is not None:  # the run ended mid-episode: keep only whole episodes
            self.writer.abandon()
            self.writer = None
        if self.shard is not None:
            self.shard.close()
        self.game.close()
