"""`gamengen record --policy human`: a person plays the *real* game in the browser player, with the
same page and keymap as the learned game, and every step goes into the trajectory store. Users'
own play becomes training data (issue 5).

One shard ``human`` per store; each reset or death closes an episode and starts the next.
An episode cut by a reset or a closed page is kept, marked truncated, like the recorder's cut.
"""

from __future__ import annotations

from ..data.store import ShardWriter, Store, spec_of
from ..envs import EnvConfig, make_env
from ..record.recorder import episode_seeds

HUMAN_SHARD = "human"


class HumanRecording:
    def __init__(self, out: str, env_id: str, height: int, width: int, seed: int = 0):
        env = make_env(env_id, EnvConfig(height=height, width=width))
        try:
            self.game_version = env.game_version
            self.store = Store.create_or_open(out, spec_of(env, images=()))
        finally:
            env.close()
        self.seed = seed
        self.shard = ShardWriter(self.store, HUMAN_SHARD, {"policy": "human", "seed": seed})
        self.writer = None
        self.saved = 0  # episodes finished by this launch

    def begin(self) -> int:
        """Close any open episode and start the next; returns its env seed."""
        self.end()
        index = len(self.shard.records)
        env_seed, _ = episode_seeds(self.seed, 0, index)
        self.writer = self.shard.begin(f"e{index:06d}", {"policy": "human", "seed": self.seed, "index": index,
                                                        "env_seed": env_seed, "game_version": self.game_version})
        return env_seed

    def add(self, obs, action: int, nxt) -> None:
        self.writer.add(obs.frame, action, nxt.reward, nxt.terminated, nxt.truncated, obs.variables, {})

    def end(self) -> None:
        w, self.writer = self.writer, None
        if w is None:
            return
        if len(w) == 0:
            w.abandon()
            return
        if not (w.terminated[-1] or w.truncated[-1]):
            w.truncated[-1] = True  # cut by the player, as the recorder marks a cut episode
        w.finish()
        self.saved += 1

    def close(self) -> None:
        self.end()
        self.shard.close()
