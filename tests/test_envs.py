"""Every adapter follows the one protocol, with the real games (no mocks)."""

import numpy as np
import pytest

from gamengen.envs import EnvConfig, make_env
from gamengen.errors import UserError

ENV_IDS = ["toy:cursor", "vizdoom:freedoom1/E1M1", "vizdoom:scenario/basic", "atari:Breakout", "gym:ALE/Pong-v5"]


def rollout(env, seed, actions):
    step = env.reset(seed)
    frames = [step.frame]
    for a in actions:
        step = env.step(a)
        if step.frame is None or step.terminated or step.truncated:
            break
        frames.append(step.frame)
    return np.stack(frames)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_adapter_protocol(env_id):
    env = make_env(env_id, EnvConfig(height=120, width=160))
    try:
        first = env.reset(1)
        assert first.frame.shape == (120, 160, 3) and first.frame.dtype == np.uint8
        assert len(env.action_set) >= 2 and all(isinstance(n, str) and n for n in env.action_set.names)
        assert set(first.variables) == set(env.variable_names)
        assert env.fps > 0 and env.game_version
        actions = [i % len(env.action_set) for i in range(60)]
        a, b, c = rollout(env, 5, actions), rollout(env, 5, actions), rollout(env, 6, actions)
        assert np.array_equal(a, b), "same seed and actions must replay the same frames"
        assert len(np.unique(a.reshape(len(a), -1), axis=0)) > 1, "the picture must change during play"
        assert not (len(a) == len(c) and np.array_equal(a, c)) or env_id.startswith(("atari", "gym")), "seed matters"
    finally:
        env.close()


def test_vizdoom_paper_resolution_automap_and_frame_skip():
    env = make_env("vizdoom:freedoom1/E1M1", EnvConfig(height=240, width=320, frame_skip=4, automap=True))
    try:
        s = env.reset(0)
        assert s.frame.shape == (240, 320, 3) and s.images["automap"].shape == (240, 320, 3)
        assert env.fps == 35 / 4
        assert "FORWARD+ATTACK" in env.action_set.names
        combo = env.action_set.combos[env.action_set.names.index("FORWARD+ATTACK")]
        pressed = {b for b, on in zip(env.action_set.buttons, combo) if on}
        assert pressed == {"MOVE_FORWARD", "ATTACK"}
        assert {"HEALTH", "POSITION_X", "KILLCOUNT"} <= set(s.variables)
    finally:
        env.close()


@pytest.mark.parametrize("bad", ["nope", "doom:E1M1", "vizdoom:freedoom1", "vizdoom:scenario/nothere",
                                 "toy:other", "gym:NoSuchEnv-v0", "atari:NoSuchGame"])
def test_unknown_env_ids_are_user_errors(bad):
    with pytest.raises(UserError):
        make_env(bad)
