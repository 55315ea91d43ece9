"""Stage 1: the shaped reward, the agent's env on real Freedoom, a tiny PPO run, export, resume, report."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from conftest import cli, snapshot
from gamengen.agent.env import AgentEnvConfig, DoomAgentEnv
from gamengen.agent.reward import CELL, NEEDED, RewardConfig, ShapedReward
from gamengen.data.store import Store


def variables(**changes) -> dict[str, float]:
    v = {k: 0.0 for k in NEEDED}
    v.update(HEALTH=100.0, AMMO2=50.0)
    v.update(changes)
    return v


def test_shaped_reward_follows_the_paper_table():
    r = ShapedReward(RewardConfig())
    r.reset(variables())
    assert r.step(variables()) == 0.0  # nothing happened
    assert r.step(variables(KILLCOUNT=1, HITCOUNT=2)) == 1000 + 2 * 300
    assert r.step(variables(KILLCOUNT=1, HITCOUNT=2, HITS_TAKEN=1, HEALTH=90)) == -100 + 10 * -10
    # ammo: +10 per unit gained, -1 per unit spent
    assert r.step(variables(KILLCOUNT=1, HITCOUNT=2, HITS_TAKEN=1, HEALTH=90, AMMO2=45)) == -5
    assert r.step(variables(KILLCOUNT=1, HITCOUNT=2, HITS_TAKEN=1, HEALTH=90, AMMO2=47)) == 20
    base = variables(KILLCOUNT=1, HITCOUNT=2, HITS_TAKEN=1, HEALTH=90, AMMO2=47)
    # a new cell 3 cells (L1) from the start pays 20 * (1 + 0.5 * 3); coming back pays nothing
    far = dict(base, POSITION_X=2 * CELL + 1, POSITION_Y=CELL + 1)
    assert r.step(far) == 20 * (1 + 0.5 * 3)
    assert r.step(base) == 0.0 and r.step(far) == 0.0
    assert r.coverage == 2 and r.kills == 1
    assert r.step({"DEAD": 1.0}) == -5000
    assert r.step({"DEAD": 0.0}) == 0.0  # map exit


def test_agent_env_passes_checker_and_records_every_frame(tmp_path):
    from stable_baselines3.common.env_checker import check_env

    cfg = AgentEnvConfig(max_episode_frames=40, repeat_prob=0.0)
    env = DoomAgentEnv(cfg, index=3, store=str(tmp_path / "store"))
    try:
        check_env(env, warn=True)  # several resets; their unfinished episodes are dropped
        obs, _ = env.reset()
        # the automap is 2x2 max-pooled by default: every line pixel survives at 80x60
        assert obs["frame"].shape == (3, 120, 160) and obs["automap"].shape == (1, 60, 80)
        raw = env.step_obs.images["automap"].max(axis=2)
        assert raw.any() and np.array_equal(obs["automap"][0], raw.reshape(60, 2, 80, 2).max(axis=(1, 3)))
        assert (obs["actions"] == env.n).all()  # "no action yet"
        actions, shown = [], [obs["frame"].transpose(1, 2, 0)]
        while True:
            a = int(np.random.default_rng(len(actions)).integers(env.n))
            obs, r, term, trunc, info = env.step(a)
            actions.append(a)
            if term or trunc:
                break
            shown.append(obs["frame"].transpose(1, 2, 0))
            assert obs["actions"][-1] == a
        assert info["episode_stats"]["frames"] == 40
    finally:
        env.close()
    store = Store.open(tmp_path / "store")
    recs = store.episodes()
    assert {r.shard for r in recs} == {"agent-train-3"} and recs[-1].length == 40
    g = store.open_episode(recs[-1])  # the episode played above (the checker's come first)
    # each decision holds its action for 4 frames; every frame is stored, the observed ones among them
    assert list(g["actions"][:]) == [a for a in actions for _ in range(4)]
    frames = g["frames"][:]
    for i, f in enumerate(shown):
        np.testing.assert_array_equal(frames[4 * i], f)
    assert recs[-1].meta["phase"] == "train" and "coverage" in recs[-1].meta


TINY_AGENT = ["agent", "--n-envs", "2", "--n-steps", "16", "--n-epochs", "1", "--max-episode-frames", "48",
              "--vec-env", "inprocess", "--eval-every", "512", "--no-bf16"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("agent") / "run"
    cli(*TINY_AGENT, "--out", run, "--steps", "1024", check=True)  # the 2,000-frame smoke run, in two legs
    first = json.loads((run / "checkpoint" / "checkpoint.json").read_text())
    cli(*TINY_AGENT, "--out", run, "--steps", "2048", check=True)  # resumes from the checkpoint, plays the rest
    return run, first


def test_tiny_run_resumes_exports_and_records_everything(tiny_run):
    run, first = tiny_run
    assert first["frames"] == 1024
    assert json.loads((run / "checkpoint" / "checkpoint.json").read_text())["frames"] == 2048
    assert cli("data", "verify", run / "store").returncode == 0
    store = Store.open(run / "store")
    recs = store.episodes()
    phases = {r.meta["phase"] for r in recs}
    assert phases == {"train", "eval"}
    steps = sorted({r.meta["training_step"] for r in recs if r.meta["phase"] == "train"})
    assert steps[0] == 0 and steps[-1] >= 1024  # episodes begun after the resume carry its step
    assert {r.shard for r in recs} >= {"agent-train-0", "agent-train-1", "agent-eval-0"}
    cfg = json.loads((run / "policy" / "config.json").read_text())
    assert cfg["trained_frames"] == 2048 and cfg["history"] == 32


def test_resume_with_other_settings_is_refused(tiny_run):
    run, _ = tiny_run
    before = snapshot(run)
    res = cli("agent", "--out", run, "--n-envs", "3", "--steps", "512", "--vec-env", "inprocess")
    assert res.returncode == 2 and "n_envs" in res.stderr and "fix:" in res.stderr
    assert snapshot(run) == before


def test_record_with_exported_agent_and_report(tiny_run, tmp_path):
    run, _ = tiny_run
    out = tmp_path / "agentplay"
    cli("record", "--policy", f"agent:{run / 'policy'}", "--episodes", "2", "--max-episode-steps", "40",
        "--out", out, check=True)
    recs = Store.open(out).episodes()
    assert len(recs) == 2 and all(r.meta["policy"] == "agent:policy" for r in recs)
    assert Store.open(out).spec.images == ()  # the agent saw the automap; the store keeps frames only
    res = cli("agent", "report", run, "--compare", f"agent={out}", "--out", tmp_path / "rep", check=True)
    md = (tmp_path / "rep" / "agent_report.md").read_text()
    assert "| agent |" in md and (tmp_path / "rep" / "agent_report.png").stat().st_size > 1000
    data = json.loads((tmp_path / "rep" / "agent_report.json").read_text())
    assert data["compare"]["agent"]["coverage"]["n"] == 2
    assert data["curve"]["train"] and data["curve"]["eval"]
    assert "wrote" in res.stdout
    # an fp16 copy, to commit or share: half the size, the same network within fp16 rounding
    cli("agent", "export", run, "--out", tmp_path / "p16", check=True)
    size = lambda d: (d / "model.safetensors").stat().st_size  # noqa: E731
    assert size(tmp_path / "p16") < 0.55 * size(run / "policy")
    from gamengen.agent.policy import load_policy

    (a, _), (b, cfg) = load_policy(run / "policy"), load_policy(tmp_path / "p16")
    assert cfg["weights"] == "fp16"
    for k, v in a.state_dict().items():
        assert torch.allclose(v.float(), b.state_dict()[k].float(), atol=1e-3, rtol=1e-3), k


def test_agent_on_a_game_without_doom_variables_is_refused(tmp_path):
    res = cli("agent", "--env", "toy:cursor", "--out", tmp_path / "run", "--steps", "64")
    assert res.returncode == 2 and "Freedoom map" in res.stderr
    assert not (tmp_path / "run").exists()


def test_bad_agent_folder_is_one_line_and_writes_nothing(tmp_path):
    (tmp_path / "bogus").mkdir()
    (tmp_path / "bogus" / "config.json").write_text("{not json")
    for folder in (tmp_path / "missing", tmp_path / "bogus"):
        res = cli("record", "--policy", f"agent:{folder}", "--episodes", "1", "--out", tmp_path / "store")
        assert res.returncode == 2 and res.stderr.startswith("error:") and "fix:" in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "store").exists()


def damaged_copy(tiny_run, tmp_path, damage) -> tuple:
    run = tmp_path / "run"
    shutil.copytree(tiny_run[0], run)
    damage(run)
    before = snapshot(run)
    res = cli(*TINY_AGENT, "--out", run, "--steps", "4096")
    return res, before, snapshot(run)


def test_damaged_checkpoint_is_refused_in_one_line(tiny_run, tmp_path):
    def flip_a_byte(run):
        path = run / "checkpoint" / "ppo.zip"
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))

    res, before, after = damaged_copy(tiny_run, tmp_path, flip_a_byte)
    assert res.returncode == 2 and "damaged" in res.stderr and "fix:" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and before == after


def test_resume_on_another_action_set_is_refused(tiny_run, tmp_path):
    def other_actions(run):
        path = run / "policy" / "config.json"
        cfg = json.loads(path.read_text())
        cfg["actions"] = cfg["actions"][:-1]
        path.write_text(json.dumps(cfg))

    res, before, after = damaged_copy(tiny_run, tmp_path, other_actions)
    assert res.returncode == 2 and "trained on actions" in res.stderr and before == after
    assert len(res.stderr.strip().splitlines()) == 1


def test_sigkill_during_training_then_resume(tmp_path):
    """Kill the whole process group at a random moment after the first checkpoint, check the store,
    resume with the same command, and end with a complete run and a valid store."""
    run = tmp_path / "run"
    args = [*TINY_AGENT, "--out", str(run), "--steps", "1536"]
    rng = random.Random(0)
    for attempt in range(2):
        proc = subprocess.Popen([sys.executable, "-m", "gamengen", *args], start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 300
        while not (run / "checkpoint" / "checkpoint.json").exists() and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(rng.uniform(0.5, 4.0))
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        assert cli("data", "verify", run / "store").returncode == 0  # whatever the moment, the store is valid
    cli(*args, check=True)
    assert json.loads((run / "checkpoint" / "checkpoint.json").read_text())["frames"] == 1536
    assert cli("data", "verify", run / "store").returncode == 0
    assert not list((run / "checkpoint").glob("*.tmp*"))


@pytest.mark.parametrize("scenario", ["basic", "defend_the_center"])
def test_the_agent_trains_on_builtin_scenarios_with_their_own_reward(scenario, tmp_path):
    """ViZDoom reports the paper's variables on any map, so the shaped reward applies to scenarios;
    the scenario's own reward (its goal) is added, weighted by game_reward."""
    env = DoomAgentEnv(AgentEnvConfig(env_id=f"vizdoom:scenario/{scenario}", repeat_prob=0.0))
    try:
        env.reset(seed=0)
        _, reward, *_ = env.step(0)  # NOOP for `hold` tics: no shaped event, the scenario's living reward
        living = {"basic": -1.0, "defend_the_center": 0.0}[scenario]  # per tic, from the scenario's .cfg
        assert reward == pytest.approx(env.config.game_reward * living * env.config.hold)
    finally:
        env.close()
    out = tmp_path / "run"
    res = cli("agent", "--env", f"vizdoom:scenario/{scenario}", "--steps", "128", "--n-envs", "2", "--n-steps", "16",
              "--n-epochs", "1", "--batch-size", "32", "--vec-env", "inprocess", "--eval-every", "1000000",
              "--out", out)
    assert res.returncode == 0, res.stderr
    assert (out / "policy" / "model.safetensors").exists()
    assert json.loads((out / "config.json").read_text())["env"]["env_id"] == f"vizdoom:scenario/{scenario}"


def test_a_freedoom_run_from_before_the_game_reward_resumes(tiny_run, tmp_path):
    run = tmp_path / "old"
    shutil.copytree(tiny_run[0], run)
    settings = json.loads((run / "config.json").read_text())
    del settings["env"]["game_reward"]  # as written before the field existed
    (run / "config.json").write_text(json.dumps(settings))
    res = cli(*TINY_AGENT, "--out", run, "--steps", "2048")  # already there: resumes and exports
    assert res.returncode == 0, res.stderr
    assert json.loads((run / "config.json").read_text())["env"]["game_reward"] == 10.0
