"""`gamengen record`: play a game with a policy and write every step into a trajectory store.

Each worker process owns one shard ``s<seed>-w<worker>``. Episode i of a shard is seeded from
(seed, worker, i) alone, so a recorder killed at any moment and run again continues exactly where
the last complete episode ended and produces the same data an uninterrupted run would have.

With ``--events`` the game fires in-game events on a schedule drawn from each episode's env seed
(envs.base.event_schedule, as GameGen-X §3.2 changes events every 5-10 s); the recorder logs each
step's event and, with ``--labels``, the objects in view, for captions (data/captions.py).
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..data.store import ShardWriter, Store, spec_of
from ..envs import EnvConfig, GameEnv, make_env
from ..errors import UserError
from ..processes import die_with_parent
from .policies import POLICIES, make_policy


@dataclass
class RecordConfig:
    env_id: str = "vizdoom:freedoom1/E1M1"
    policy: str = "random"
    steps: int | None = None  # total env steps over all workers ...
    episodes: int | None = None  # ... or total episodes
    seed: int = 0
    workers: int = 1
    max_episode_steps: int = 1000  # episodes are cut (truncated) here; ~29 s of DOOM at 35 steps/s
    compression_level: int = 1  # zstd level of new stores' frame chunks; negative = faster, larger
    env: EnvConfig = field(default_factory=EnvConfig)

    def __post_init__(self):
        if self.policy not in POLICIES and not self.policy.startswith("agent:"):
            raise UserError(f"unknown policy '{self.policy}'",
                            "use --policy " + " or --policy ".join(POLICIES) + " or --policy agent:<policy folder>")
        # The automap is stored only when asked for; an agent policy sees it either way (its input).
        self.stored_images = ("automap",) if self.env.automap else ()
        if self.policy.startswith("agent:"):
            self.env = dataclasses.replace(self.env, automap=True)
        if (self.steps is None) == (self.episodes is None):
            raise UserError("give exactly one of --steps and --episodes", "e.g. --steps 20000")
        if (self.steps or self.episodes or 0) < 1:
            raise UserError("--steps/--episodes must be at least 1", "e.g. --steps 20000")
        if self.workers < 1:
            raise UserError(f"--workers must be at least 1, got {self.workers}", "e.g. --workers 2")
        if self.max_episode_steps < 2:
            raise UserError("--max-episode-steps must be at least 2", "e.g. --max-episode-steps 1000")
        for flag, on in (("--labels", self.env.labels), ("--events", self.env.events)):
            if on and not self.env_id.startswith("vizdoom:"):
                raise UserError(f"{flag} needs a ViZDoom game, not {self.env_id}",
                                f"drop {flag}, or record e.g. --env vizdoom:freedoom1/E1M1")

    def budget(self, worker: int) -> int:
        """This worker's share of the steps (or episodes)."""
        total = self.steps if self.steps is not None else self.episodes
        return total // self.workers + (worker < total % self.workers)

    def shard_info(self, worker: int) -> dict:
        """Settings a shard must keep across resumes (the budget may grow: that extends it)."""
        return {"policy": self.policy, "seed": self.seed, "worker": worker, "workers": self.workers,
                "max_episode_steps": self.max_episode_steps}


def episode_seeds(seed: int, worker: int, index: int) -> tuple[int, int]:
    """(env seed, policy seed) of one episode, independent of everything else."""
    env_seed, policy_seed = np.random.SeedSequence([seed, worker, index]).generate_state(2)
    return int(env_seed), int(policy_seed)


def record_shard(root: Path, cfg: RecordConfig, worker: int, report: Callable[[int], None],
                 env: GameEnv | None = None) -> tuple[int, float]:
    """Record this worker's budget into its shard; ``report(n)`` is told of n new steps/episodes.

    Returns (frames written now, seconds spent writing them) for benchmarks."""
    env = env or make_env(cfg.env_id, cfg.env)
    store = Store.open(root)
    shard = ShardWriter(store, f"s{cfg.seed}-w{worker}", cfg.shard_info(worker))
    policy = make_policy(cfg.policy, env.action_set)
    budget = cfg.budget(worker)
    try:
        steps_done = steps_before = sum(r.length for r in shard.records)
        index = len(shard.records)
        t0 = time.perf_counter()
        while True:
            left = budget - (steps_done if cfg.steps is not None else index)
            if left <= 0:
                break
            limit = cfg.max_episode_steps if cfg.steps is None else min(cfg.max_episode_steps, left)
            env_seed, policy_seed = episode_seeds(cfg.seed, worker, index)
            meta = {"policy": policy.id, "seed": cfg.seed, "worker": worker, "index": index, "env_seed": env_seed,
                    "game_version": env.game_version}
            if getattr(env, "title", None):
                meta["title"] = env.title  # the level's name, for captions
            writer = shard.begin(f"e{index:06d}", meta)
            policy.reset(np.random.default_rng(policy_seed))
            obs = env.reset(env_seed)
            while True:
                action = policy.act(obs)
                nxt = env.step(action)
                cut = len(writer) + 1 >= limit and not (nxt.terminated or nxt.truncated)
                # row t: obs is frames[t] with its variables and objects in view; the event was
                # fired together with this action, so it is an outcome of row t like the reward
                writer.add(obs.frame, action, nxt.reward, nxt.terminated, nxt.truncated or cut,
                           obs.variables, obs.images, obs.labels, nxt.event)
                if cfg.steps is not None and len(writer) % 64 == 0:
                    report(64)
                if nxt.terminated or nxt.truncated or cut:
                    break
                obs = nxt
            rec = writer.finish()
            steps_done += rec.length
            index += 1
            report(rec.length % 64 if cfg.steps is not None else 1)
        return steps_done - steps_before, time.perf_counter() - t0
    finally:
        shard.close()
        env.close()


def progress_done(store: Store, cfg: RecordConfig) -> int:
    """Steps (or episodes) already recorded in this run's shards, for the progress bar on resume."""
    done, records = 0, store.episodes()
    for w in range(cfg.workers):
        recs = [r for r in records if r.shard == f"s{cfg.seed}-w{w}"]
        done += min(cfg.budget(w), sum(r.length for r in recs) if cfg.steps is not None else len(recs))
    return done


def _worker_main(root: str, cfg: RecordConfig, worker: int, queue) -> None:
    die_with_parent()
    try:
        timing = record_shard(Path(root), cfg, worker, lambda n: queue.put(("progress", n)))
        queue.put(("done", timing))
    except UserError as e:
        queue.put(("usererror", (e.what, e.fix)))
    except BaseException:  # noqa: BLE001 - the parent reports it
        queue.put(("crash", traceback.format_exc()))


def record(out: str | os.PathLike, cfg: RecordConfig, report: Callable[[int], None] = lambda n: None,
           timings: list | None = None) -> Store:
    """Create or resume the store at ``out`` and record ``cfg``'s budget into it.

    ``timings`` (optional) receives each worker's (frames, seconds) for benchmarks."""
    timings = [] if timings is None else timings
    env = make_env(cfg.env_id, cfg.env)  # validates the env id and finds the store spec
    try:
        make_policy(cfg.policy, env.action_set)  # a bad policy fails before anything is written
        store = Store.create_or_open(out, spec_of(env, cfg.compression_level, cfg.stored_images))
    except BaseException:
        env.close()
        raise
    if cfg.workers == 1:
        timings.append(record_shard(store.root, cfg, 0, report, env=env))
        return store
    env.close()
    ctx = mp.get_context("spawn")  # no forked copies of a game engine's state
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker_main, args=(str(store.root), cfg, w, queue), daemon=True)
             for w in range(cfg.workers)]
    for p in procs:
        p.start()
    running, failure = len(procs), None
    try:
        while running:
            try:
                kind, payload = queue.get(timeout=1.0)
            except Exception:  # queue.Empty: check nobody died silently
                if any(p.exitcode not in (None, 0) for p in procs):
                    failure = RuntimeError("a recorder worker died; re-run the same command to resume")
                    break
                continue
            if kind == "progress":
                report(payload)
            elif kind == "done":
                timings.append(payload)
                running -= 1
            else:
                failure = UserError(*payload) if kind == "usererror" else RuntimeError(payload)
                break
    finally:
        for p in procs:
            if failure is not None and p.is_alive():
                p.terminate()
            p.join()
    if failure is not None:
        raise failure
    return store


def bench_env(cfg: RecordConfig, worker: int, steps: int) -> tuple[int, float]:
    """Raw env speed with the same policy, writing nothing: (frames, seconds)."""
    env = make_env(cfg.env_id, cfg.env)
    policy = make_policy(cfg.policy, env.action_set)
    env_seed, policy_seed = episode_seeds(cfg.seed, worker, 0)
    policy.reset(np.random.default_rng(policy_seed))
    obs = env.reset(env_seed)
    t0, n, ep_len = time.perf_counter(), 0, 0
    while n < steps:
        nxt = env.step(policy.act(obs))
        n += 1
        ep_len += 1
        if nxt.terminated or nxt.truncated or ep_len >= cfg.max_episode_steps:
            obs, ep_len = env.reset(env_seed + n), 0
        else:
            obs = nxt
    dt = time.perf_counter() - t0
    env.close()
    return n, dt

