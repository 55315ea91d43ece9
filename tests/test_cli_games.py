"""The same commands work for Freedoom, an Atari game and the toy game, with no code change."""

import csv
import itertools
import json

import imageio.v3 as iio
import numpy as np
import pytest

from conftest import cli
from gamengen.data.store import Store
from gamengen.envs import EnvConfig, make_env
from gamengen.envs.base import ActionSet
from gamengen.envs.vizdoom_env import DOOM_ACTIONS
from gamengen.record.policies import ControlPolicy, ControlPolicyConfig


def check_commands(store_path, tmp_path, frames):
    assert cli("data", "verify", store_path).returncode == 0
    info = json.loads(cli("data", "info", store_path, "--json", check=True).stdout)
    assert info["frames"] == frames and info["unlisted_folders"] == 0
    assert info["compression_ratio"] > 1
    for name in ("p.mp4", "p.gif"):
        cli("data", "preview", store_path, "--out", tmp_path / name, "--frames", "40", check=True)
        video = iio.imread(tmp_path / name)
        assert video.shape[0] == 40 and video.shape[2] == 480 and video.shape[1] > 360  # 3x upscale of 160x120, text below
    cli("data", "export", store_path, "--out", tmp_path / "export", check=True)
    with open(tmp_path / "export" / "actions.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == frames
    with open(tmp_path / "export" / "episodes.csv") as f:
        eps = list(csv.DictReader(f))
    first = iio.imread(tmp_path / "export" / eps[0]["video"])
    assert first.shape[0] == int(eps[0]["length"])
    return info


def test_freedoom_e1m1(doom_store, tmp_path):
    info = check_commands(doom_store, tmp_path, 600)
    assert info["env_id"] == "vizdoom:freedoom1/E1M1" and len(info["shards"]) == 2


def test_freedoom_frames_replay_exactly_from_the_store(doom_store):
    """Lossless storage + the recorded seed and actions reproduce the game bit for bit."""
    store = Store.open(doom_store)
    rec = store.episodes()[0]
    g = store.open_episode(rec)
    env = make_env(store.spec.env_id, EnvConfig(store.spec.height, store.spec.width))
    step = env.reset(rec.meta["env_seed"])
    frames, actions = g["frames"][:], g["actions"][:]
    for t in range(rec.length):
        assert np.array_equal(step.frame, frames[t]), t
        step = env.step(int(actions[t]))
    env.close()


@pytest.mark.parametrize("env_id", ["atari:Breakout", "toy:cursor"])
def test_other_games(env_id, tmp_path):
    out = tmp_path / "store"
    cli("record", "--env", env_id, "--steps", "400", "--workers", "2", "--out", out, "--max-episode-steps", "150",
        check=True)
    info = check_commands(out, tmp_path, 400)
    assert info["env_id"] == env_id


def test_scripted_policy_and_episodes_budget(tmp_path):
    out = tmp_path / "store"
    cli("record", "--env", "vizdoom:freedoom1/E1M1", "--policy", "scripted", "--episodes", "2",
        "--max-episode-steps", "100", "--out", out, check=True)
    store = Store.open(out)
    assert [r.length for r in store.episodes()] == [100, 100]
    assert {r.meta["policy"] for r in store.episodes()} == {"scripted"}


def test_control_policy_changes_motion_keys_in_both_directions(tmp_path):
    # --policy control records data for training InstructNet's keys: one motion key at a time, a different
    # one at every change, held 4 or 8 steps, turning right as often as left (the scripted
    # explorer turns only left). Recorded in the real game, the turns show in the logged angle.
    out = tmp_path / "store"
    cli("record", "--env", "vizdoom:freedoom1/E1M1", "--policy", "control", "--episodes", "1", "--seed", "3",
        "--max-episode-steps", "600", "--frame-skip", "2", "--out", out, check=True)
    store = Store.open(out)
    names = store.spec.action_set.names
    (rec,) = store.episodes()
    assert rec.length > 300  # E1M1's monsters do not kill it this fast
    ep = store.open_episode(rec)
    actions = np.asarray(ep["actions"][:])
    held = [names[a] for a in actions]
    assert set(held) == {"TURN_LEFT", "TURN_RIGHT", "FORWARD", "BACKWARD", "STRAFE_LEFT", "STRAFE_RIGHT"}
    runs = [len(list(g)) for _, g in itertools.groupby(actions)]
    assert all(r in (4, 8) for r in runs[:-1]) and len(runs) > 20  # a change is always to another key
    variables = store.spec.variables
    angle = np.asarray(ep["game_variables"][:]).reshape(rec.length, len(variables))[:, variables.index("ANGLE")]
    turn = (np.diff(angle) + 180) % 360 - 180  # degrees per step, after the action of that step
    left, right = actions[:-1] == names.index("TURN_LEFT"), actions[:-1] == names.index("TURN_RIGHT")
    assert np.median(turn[left]) > 3 and np.median(turn[right]) < -3


def test_control_policy_draws_every_motion_key_equally():
    names = tuple(DOOM_ACTIONS)
    policy = ControlPolicy(ActionSet(names))
    policy.reset(np.random.default_rng(0))
    held = [names[policy.act(None)] for _ in range(30000)]
    for key in ControlPolicyConfig().keys:
        assert abs(held.count(key) / len(held) - 1 / 6) < 0.02, key
    atari = ControlPolicy(ActionSet(("NOOP", "FIRE", "UP")))  # none of the motion keys: all actions
    atari.reset(np.random.default_rng(0))
    assert {atari.act(None) for _ in range(200)} == {0, 1, 2}


def test_bench_record_prints_both_figures():
    res = cli("bench", "record", "--env", "toy:cursor", "--steps", "2000", "--json", check=True)
    figures = json.loads(res.stdout)
    assert figures["frames"] == 2000 and {"env_fps", "store_fps", "store_fps_steady"} <= set(figures)


def test_bench_play_reports_speed_against_the_games_own_clock():
    from pathlib import Path

    model = Path(__file__).resolve().parents[1] / "models" / "freedoom-e1m1-1step"
    res = cli("bench", "play", "--model", model, "--frames", "4", "--json", check=True)
    r = json.loads(res.stdout[res.stdout.index("{"):])
    assert r["frame_skip"] == 1 and r["game_fps"] == 35.0
    for runtime in ("onnx", "torch"):  # real time: frames per second over the game's 35 per second
        assert r[runtime]["real_time"] == pytest.approx(r[runtime]["fps"] / 35.0)
        assert r[runtime]["latency_ms"]["p95"] >= r[runtime]["latency_ms"]["p50"] > 0
