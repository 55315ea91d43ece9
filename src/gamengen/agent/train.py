"""`gamengen agent`: PPO on DOOM with the shaped reward, every played frame recorded (paper §4.1).

A run folder holds everything::

    <run>/config.json        the AgentConfig; a resumed run must match it (the step budget may grow)
    <run>/store/             trajectory store: shards agent-train-<env> and agent-eval-0
    <run>/checkpoint/        SB3's own format, for resuming this run only (ppo.zip + checkpoint.json)
    <run>/policy/            the exported policy: model.safetensors + config.json
    <run>/tb/                TensorBoard logs

Killed at any moment, the same command resumes from the last checkpoint. Games cannot be
checkpointed mid-episode, so the episodes in flight are dropped (the store discards their temporary
folders) and new ones start; every episode that was listed stays.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable


from ..atomic import fsync_dir, sha256_file, write_json_atomic
from ..errors import UserError
from .env import AgentEnvConfig, DoomAgentEnv


@dataclass
class AgentConfig:
    """Defaults are the paper's PPO settings (§4.1); only the step budget is ours (CPU-bound)."""

    env: AgentEnvConfig = field(default_factory=AgentEnvConfig)
    steps: int = 1_000_000  # game frames played by the learner (decisions x hold), all envs together
    n_envs: int = 8  # parallel games
    n_steps: int = 512  # decisions per env per rollout
    gamma: float = 0.99
    ent_coef: float = 0.1
    batch_size: int = 64
    n_epochs: int = 10
    learning_rate: float = 1e-4
    # The shaped reward is in the hundreds to thousands; scaling it keeps the value loss, which
    # shares the CNN with the policy, from swamping the policy gradient (SB3 normalises advantages).
    reward_scale: float = 0.001
    features_per_image: int = 512
    head_width: int = 256
    bf16: bool = True  # bf16 autocast for the CNNs (see policy.AgentFeatures)
    vec_env: str = "subprocess"  # or "inprocess"; docs/agent.md has the measurement
    record: bool = True  # write every played frame to <run>/store (off only to measure its cost)
    eval_every: int = 100_000  # frames between evaluation episodes (recorded too, phase "eval")
    eval_episodes: int = 2
    checkpoint_every: int = 1  # rollouts between checkpoints
    device: str = "auto"

    def __post_init__(self):
        if self.vec_env not in ("subprocess", "inprocess"):
            raise UserError(f"unknown vec env '{self.vec_env}'", "use subprocess or inprocess")
        if self.env.automap_pool not in (1, 2):  # at 40x30 the Nature CNN has nothing left to convolve
            raise UserError(f"automap_pool must be 1 or 2, got {self.env.automap_pool}", "pass --automap-pool 1 or 2")
        for name in ("steps", "n_envs", "n_steps", "batch_size", "n_epochs"):
            if getattr(self, name) < 1:
                raise UserError(f"{name} must be at least 1, got {getattr(self, name)}", f"pass a positive --{name}")

    def to_json(self) -> dict:
        return asdict(self)


def _make_env(cfg: AgentEnvConfig, index: int, store: str | None, subprocess: bool, reward_scale: float):
    def make():
        from gymnasium.wrappers import TransformReward

        if subprocess:
            from ..processes import die_with_parent

            die_with_parent()  # a killed learner leaves no game (and no shard lock) behind
        return TransformReward(DoomAgentEnv(cfg, index, store, "train"), lambda r: r * reward_scale)

    return make


def _checkpoint(model, folder: Path, frames: int) -> None:
    """SB3 zip written under a temporary name and fsynced; its sha256 goes into checkpoint.json
    (beside the previous zip's) before the rename, so whichever zip a kill leaves is verifiable."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / "ppo.tmp.zip"
    model.save(tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    try:
        previous = json.loads((folder / "checkpoint.json").read_text()).get("sha256")
    except (OSError, json.JSONDecodeError):
        previous = None
    write_json_atomic(folder / "checkpoint.json", {"num_timesteps": int(model.num_timesteps), "frames": frames,
                                                   "sha256": sha256_file(tmp), "previous_sha256": previous,
                                                   "saved": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    os.replace(tmp, folder / "ppo.zip")
    fsync_dir(folder)


def check_checkpoint(folder: Path, actions: list[str]) -> None:
    """Refuse, in one line, a checkpoint that is damaged or was trained on another action set.

    The zip must match the digest of the last save or, after a kill between writing
    checkpoint.json and the rename, the one before. Checkpoints written before digests were
    recorded are read as they are."""
    fix = f"delete {folder} to restart the PPO run (the recorded store stays valid), or restore it from a backup"
    try:
        meta = json.loads((folder / "checkpoint.json").read_text())
    except (OSError, json.JSONDecodeError):
        raise UserError(f"{folder}/checkpoint.json is missing or damaged", fix) from None
    if "sha256" in meta and sha256_file(folder / "ppo.zip") not in (meta["sha256"], meta.get("previous_sha256")):
        raise UserError(f"checkpoint {folder}/ppo.zip is damaged (its sha256 does not match checkpoint.json)", fix)
    policy = folder.parent / "policy" / "config.json"
    if policy.exists():
        try:
            trained = json.loads(policy.read_text()).get("actions")
        except json.JSONDecodeError:
            trained = None
        if trained is not None and trained != actions:
            raise UserError(f"run {folder.parent} was trained on actions {trained}, this game has {actions}",
                            "resume with the game the run was started on, or use another --out")


def export_config(cfg: AgentConfig, env: DoomAgentEnv) -> dict:
    """What `record --policy agent:<dir>` needs to rebuild the network and play like training did."""
    e = env.game
    return {"kind": "gamengen-agent-policy", "env_id": cfg.env.env_id, "actions": list(e.action_set.names),
            "height": e.config.height, "width": e.config.width, "hold": cfg.env.hold,
            "repeat_prob": cfg.env.repeat_prob, "history": cfg.env.history,
            "automap_pool": cfg.env.automap_pool,
            "features_per_image": cfg.features_per_image, "head_width": cfg.head_width}


def train(out: str | os.PathLike, cfg: AgentConfig, report: Callable[[int, int], None] = lambda done, total: None):
    """Train (or resume) the agent in run folder ``out``; ``report(frames_done, frames_total)``."""
    import torch
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    from .policy import export_policy

    out = Path(out)
    exported = _prepare_run(out, cfg)
    store = out / "store"
    sub = cfg.vec_env == "subprocess"
    makers = [_make_env(cfg.env, i, str(store) if cfg.record else None, sub, cfg.reward_scale)
              for i in range(cfg.n_envs)]
    venv = SubprocVecEnv(makers, start_method="spawn") if sub else DummyVecEnv(makers)
    hold = cfg.env.hold
    evaluator = _Evaluator(cfg, store)
    try:
        model = _load_or_create_model(out, cfg, venv)
        torch.set_num_threads(max(1, os.cpu_count() or 1))

        def save(timesteps: int) -> None:
            frames = timesteps * hold
            _checkpoint(model, out / "checkpoint", frames)
            export_policy(model.policy, out / "policy", {**exported, "trained_frames": frames})

        venv.env_method("set_training_step", model.num_timesteps * hold)  # learn() resets the games first
        remaining = max(0, cfg.steps // hold - model.num_timesteps)
        report(model.num_timesteps * hold, cfg.steps)
        if remaining:
            model.learn(remaining, callback=_training_hooks(model, cfg, report, save, evaluator),
                        reset_num_timesteps=False, tb_log_name="ppo")
        report(model.num_timesteps * hold, cfg.steps)  # `bench agent` times learn() up to here
        if remaining:
            save(model.num_timesteps)
        return model
    finally:
        evaluator.close()
        venv.close()


def _prepare_run(out: Path, cfg: AgentConfig) -> dict:
    """Check the env, the run's settings and any checkpoint, create the store; -> the policy's export
    config. Nothing is written before the env id is known to work."""
    from ..data.store import Store, spec_of
    from ..train.run import RunFolder

    probe = DoomAgentEnv(cfg.env, 0, None)
    try:
        exported = export_config(cfg, probe)
        if (out / "checkpoint" / "ppo.zip").exists():
            check_checkpoint(out / "checkpoint", exported["actions"])
        RunFolder(out, cfg.to_json(), upgrade=_add_game_reward).open()
        Store.create_or_open(out / "store", spec_of(probe.game, images=()))  # once here, before the workers race
    finally:
        probe.close()
    return exported


def _add_game_reward(old: dict) -> None:
    """Runs started before the game's own reward counted (AgentEnvConfig.game_reward) resume: they
    trained on Freedoom maps, whose game reward is 0, so any weight gives them the same reward."""
    if "env_id" in old.get("env", {}) and old["env"]["env_id"].startswith("vizdoom:freedoom"):
        old["env"].setdefault("game_reward", AgentEnvConfig().game_reward)


def _load_or_create_model(out: Path, cfg: AgentConfig, venv):
    from stable_baselines3 import PPO

    from .policy import policy_kwargs

    ckpt = out / "checkpoint" / "ppo.zip"
    if not ckpt.exists():
        return PPO("MultiInputPolicy", venv, learning_rate=cfg.learning_rate, n_steps=cfg.n_steps,
                   batch_size=cfg.batch_size, n_epochs=cfg.n_epochs, gamma=cfg.gamma, ent_coef=cfg.ent_coef,
                   policy_kwargs=policy_kwargs(cfg.features_per_image, cfg.head_width, cfg.bf16),
                   tensorboard_log=str(out / "tb"), device=cfg.device, seed=cfg.env.seed, verbose=0)
    try:
        return PPO.load(ckpt, env=venv, device=cfg.device, tensorboard_log=str(out / "tb"))
    except (ValueError, KeyError, OSError, RuntimeError, zipfile.BadZipFile) as e:
        raise UserError(f"checkpoint {ckpt} does not load ({type(e).__name__}: {str(e)[:100]})",
                        f"delete {ckpt.parent} to restart the PPO run, or use another --out") from None


class _Evaluator:
    """The recorded evaluation episodes: a game of its own, opened at the first evaluation."""

    def __init__(self, cfg: AgentConfig, store: Path):
        self.cfg, self.store, self.env = cfg, store, None

    def run(self, model, frames: int) -> list[dict]:
        if self.env is None:
            self.env = DoomAgentEnv(self.cfg.env, 0, str(self.store) if self.cfg.record else None, "eval")
        self.env.training_step = frames
        results = []
        for _ in range(self.cfg.eval_episodes):
            obs, _ = self.env.reset()
            while True:
                action, _ = model.predict(obs, deterministic=False)
                obs, _, term, trunc, info = self.env.step(int(action))
                if term or trunc:
                    results.append(info["episode_stats"])
                    break
        return results

    def close(self) -> None:
        if self.env is not None:
            self.env.close()


def _training_hooks(model, cfg: AgentConfig, report, save, evaluator: _Evaluator):
    """The SB3 callback of a run: checkpoints, tells the games the training step, logs episode
    stats, evaluates. (SB3 is imported only when an agent trains.)"""
    from stable_baselines3.common.callbacks import BaseCallback

    hold = cfg.env.hold

    class TrainingHooks(BaseCallback):
        def __init__(self):
            super().__init__()
            self.rollouts = 0
            self.next_eval = (model.num_timesteps * hold // cfg.eval_every + 1) * cfg.eval_every

        def _on_rollout_start(self) -> None:
            # SB3 updates the policy between two rollouts: checkpoint the updated one
            # (self.num_timesteps lags until the first step; the model's count is current)
            if self.rollouts and self.rollouts % cfg.checkpoint_every == 0:
                save(model.num_timesteps)
            self.training_env.env_method("set_training_step", model.num_timesteps * hold)

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                stats = info.get("episode_stats")
                if stats:
                    for k in ("shaped_return", "kills", "coverage"):
                        self.logger.record_mean(f"episode/{k}", stats[k])
            if self.num_timesteps % (cfg.n_envs * 16) == 0:
                report(self.num_timesteps * hold, cfg.steps)
            return True

        def _on_rollout_end(self) -> None:
            self.rollouts += 1
            frames = self.num_timesteps * hold
            if frames >= self.next_eval:
                self.next_eval += cfg.eval_every
                for stats in evaluator.run(model, frames):
                    for k in ("shaped_return", "kills", "coverage"):
                        self.logger.record_mean(f"eval/{k}", stats[k])

    return TrainingHooks()


def replace(cfg: AgentConfig, **changes) -> AgentConfig:
    """A copy of ``cfg`` with top-level or ``env.*`` fields changed (for the command line)."""
    env_changes = {k[4:]: v for k, v in changes.items() if k.startswith("env.")}
    top = {k: v for k, v in changes.items() if not k.startswith("env.")}
    return dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, **env_changes), **top)
