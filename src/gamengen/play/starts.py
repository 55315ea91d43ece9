"""Start contexts: short stretches of real play the player resets to (DESIGN §6, paper §3.3).

A start is the last k <= N frames of real play up to frame t and the k-1 actions between them,
taken from held-out episodes, so the model never saw them in training. Each start also keeps the
episode's env seed and every action before frame t: the real game is deterministic given both, so
ghost mode can replay it to the same frame and run in lockstep from there.

Files in the model folder (no pickles):
    starts.safetensors   frames_i (k, H, W, 3) uint8, prefix_i (t,) int64 for start i
    starts.json          env_id, and per start its episode, env seed and t
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..atomic import write_bytes_atomic, write_json_atomic
from ..errors import UserError

STARTS_JSON, STARTS_TENSORS = "starts.json", "starts.safetensors"


@dataclass
class Start:
    frames: np.ndarray  # (k, H, W, 3): frames t-k+1..t
    prefix: np.ndarray  # (t,): every action from the episode start to frame t
    episode: str
    env_seed: int | None

    @property
    def actions(self) -> np.ndarray:
        """The k-1 actions between the start's frames."""
        return self.prefix[len(self.prefix) - (len(self.frames) - 1):]


def make_starts(store_path: str | Path, model_dir: str | Path, n: int = 4, seed: int = 0) -> list[Start]:
    """Pick n starts from distinct held-out episodes and write them into the model folder."""
    from ..engine.world import read_meta
    from ..eval.heldout import heldout_episodes

    model_dir = Path(model_dir)
    meta = read_meta(model_dir)
    k = int(meta["context"])
    store, heldout = heldout_episodes(meta, store_path, min_length=k + 1)
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(heldout), size=min(n, len(heldout)), replace=False)
    starts = []
    for j, i in enumerate(sorted(picks)):
        rec = heldout[i]
        g = store.open_episode(rec)
        # The first start is an episode's opening: its first frame alone, as training windows pad
        # the context before an episode start. The others are later moments with a full context.
        t = 0 if j == 0 else int(rng.integers(k - 1, rec.length - 1))
        first = max(0, t - k + 1)
        starts.append(Start(np.asarray(g["frames"][first:t + 1]), np.asarray(g["actions"][:t], np.int64),
                            rec.path, rec.meta.get("env_seed")))
    save_starts(model_dir, meta["env_id"], starts)
    return starts


def save_starts(model_dir: Path, env_id: str, starts: list[Start]) -> None:
    from safetensors.numpy import save

    tensors = {}
    for i, s in enumerate(starts):
        tensors[f"frames_{i}"] = np.ascontiguousarray(s.frames, np.uint8)
        tensors[f"prefix_{i}"] = np.ascontiguousarray(s.prefix, np.int64)
    write_bytes_atomic(model_dir / STARTS_TENSORS, save(tensors))
    write_json_atomic(model_dir / STARTS_JSON, {"env_id": env_id, "starts": [
        {"episode": s.episode, "env_seed": s.env_seed, "t": len(s.prefix)} for s in starts]})


def load_starts(model_dir: str | Path) -> list[Start]:
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    model_dir = Path(model_dir)
    fix = f"make them with `gamengen starts --model {model_dir} --data STORE`"
    if not (model_dir / STARTS_JSON).exists():
        raise UserError(f"{model_dir} has no start contexts ({STARTS_JSON} missing)", fix)
    try:
        info = json.loads((model_dir / STARTS_JSON).read_text())
        tensors = load_file(model_dir / STARTS_TENSORS)
        starts = [Start(tensors[f"frames_{i}"], tensors[f"prefix_{i}"], s["episode"], s["env_seed"])
                  for i, s in enumerate(info["starts"])]
    except (OSError, ValueError, KeyError, TypeError, SafetensorError) as e:
        raise UserError(f"the start contexts in {model_dir} are damaged ({type(e).__name__}: {str(e)[:80]})", fix) from None
    if not starts or any(len(s.frames) < 1 or len(s.prefix) < len(s.frames) - 1 for s in starts):
        raise UserError(f"the start contexts in {model_dir} are empty or inconsistent", fix)
    return starts
