"""Policies that drive recording. Each is seeded per episode so a resumed recording replays exactly."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..envs.base import ActionSet, Step
from ..errors import UserError


@dataclass
class RandomPolicyConfig:
    # Paper §4.1 / App. A.3: each action is held for 4 frames, and the previous action is favoured
    # when a new one is drawn, so play looks smoother than i.i.d. key mashing.
    hold: int = 4
    repeat_prob: float = 0.5  # chance to keep the previous action at a decision point


class RandomPolicy:
    id = "random"

    def __init__(self, action_set: ActionSet, config: RandomPolicyConfig | None = None):
        self.n = len(action_set)
        self.config = config or RandomPolicyConfig()

    def reset(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.t = 0
        self.action = int(rng.integers(self.n))

    def act(self, obs: Step) -> int:
        if self.t > 0 and self.t % self.config.hold == 0 and self.rng.random() >= self.config.repeat_prob:
            self.action = int(self.rng.integers(self.n))  # uniform, may pick the same action again
        self.t += 1
        return self.action


class ScriptedPolicy:
    """A simple explorer: walk forward, turn when the position stops changing, shoot now and then.

    Games without FORWARD/TURN actions or a position get a round-robin over all actions instead,
    which is deterministic and covers every action evenly (useful for tests).
    """

    id = "scripted"

    def __init__(self, action_set: ActionSet, hold: int = 4):
        self.names = action_set.names
        self.n = len(action_set)
        self.hold = hold
        need = ("FORWARD", "TURN_LEFT", "TURN_RIGHT", "ATTACK")
        self.explore = all(a in self.names for a in need)

    def reset(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.t = 0
        self.turn_left_for = 0
        self.last_pos = None
        self.still = 0

    def act(self, obs: Step) -> int:
        self.t += 1
        if not self.explore:
            return (self.t - 1) // self.hold % self.n
        pos = (obs.variables.get("POSITION_X"), obs.variables.get("POSITION_Y"))
        self.still = self.still + 1 if pos == self.last_pos else 0
        self.last_pos = pos
        if self.turn_left_for > 0:
            self.turn_left_for -= 1
            return self.names.index("TURN_LEFT")
        if self.still >= 4:  # stuck on a wall: turn a random amount
            self.turn_left_for = int(self.rng.integers(4, 24))
            return self.names.index("TURN_LEFT")
        if self.rng.random() < 0.05:
            return self.names.index("ATTACK")
        return self.names.index("FORWARD")


@dataclass
class ControlPolicyConfig:
    # GameGen-X trains its control branch on recordings whose keys are logged per frame (§3.2, the
    # instruction data of stage 2, §3.5). For keys to be learnable the next frames must depend on
    # them: here a key is held for 4 or 8 steps (4 = one latent frame of the clip codec's 4x temporal
    # compression at one step per recorded frame), then a *different* one is drawn, so the context's
    # motion seldom tells what comes next. Both turn directions are drawn equally. (Holds of up to 16
    # steps made the turn keys change in only 16% of latent transitions on E1M1, random play 12%.)
    keys: tuple[str, ...] = ("TURN_LEFT", "TURN_RIGHT", "FORWARD", "BACKWARD", "STRAFE_LEFT", "STRAFE_RIGHT")
    holds: tuple[int, ...] = (4, 8)


class ControlPolicy:
    """Motion keys, one at a time, changed every few steps: data on which keys decide the next frames.

    Games with none of the keys (Atari, toy) draw among all their actions instead.
    """

    id = "control"

    def __init__(self, action_set: ActionSet, config: ControlPolicyConfig | None = None):
        self.config = config or ControlPolicyConfig()
        names = action_set.names
        self.actions = [names.index(k) for k in self.config.keys if k in names] or list(range(len(names)))

    def reset(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.action = int(rng.choice(self.actions))
        self.left = int(rng.choice(self.config.holds))

    def act(self, obs: Step) -> int:
        if self.left == 0:
            others = [a for a in self.actions if a != self.action] or self.actions
            self.action = int(self.rng.choice(others))
            self.left = int(self.rng.choice(self.config.holds))
        self.left -= 1
        return self.action


POLICIES = {"random": RandomPolicy, "scripted": ScriptedPolicy, "control": ControlPolicy}


def make_policy(name: str, action_set: ActionSet):
    if name.startswith("agent:"):  # an exported PPO agent (gamengen agent); needs torch and SB3
        from ..agent.policy import AgentPolicy

        return AgentPolicy(name[len("agent:"):], action_set)
    if name not in POLICIES:
        raise UserError(f"unknown policy '{name}'", "use --policy random, scripted or control")
    return POLICIES[name](action_set)
