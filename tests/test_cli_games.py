"""The same commands work for Freedoom, an Atari game and the toy game, with no code change."""

import csv
import json

import imageio.v3 as iio
import numpy as np
import pytest

from conftest import cli
from gamengen.data.store import Store
from gamengen.envs import EnvConfig, make_env


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
