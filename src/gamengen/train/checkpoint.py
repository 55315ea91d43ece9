"""Crash-safe training checkpoints (docs/architecture.md).

``<run>/checkpoints/step-00001000/`` holds ``tensors.safetensors`` (model, EMA, optimizer tensors),
``state.json`` (step, RNG states as plain lists, everything else that is not a tensor) and, written
last, ``manifest.json`` with each file's sha256. A folder is built under a temporary name and renamed
into place, so a kill mid-save leaves only the previous checkpoints. Loading verifies the manifest
and falls back to the previous checkpoint when a file is damaged. No pickles anywhere.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable

import torch

from ..atomic import fsync_dir, sha256_file, write_bytes_atomic, write_json_atomic
from ..errors import UserError

TENSOR = "__tensor__"


def flatten(obj: Any, prefix: str, tensors: dict[str, torch.Tensor]) -> Any:
    """Nested dicts/lists with tensor leaves -> JSON-able tree; tensors go to ``tensors``."""
    if isinstance(obj, torch.Tensor):
        tensors[prefix] = obj.detach().cpu().contiguous()
        return {TENSOR: prefix}
    if isinstance(obj, dict):
        return {"__dict__": [[flatten(k, f"{prefix}.k{i}", tensors), flatten(v, f"{prefix}.{i}", tensors)]
                             for i, (k, v) in enumerate(obj.items())]}
    if isinstance(obj, (list, tuple)):
        return {"__list__": [flatten(v, f"{prefix}.{i}", tensors) for i, v in enumerate(obj)],
                "tuple": isinstance(obj, tuple)}
    return obj


def unflatten(tree: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(tree, dict):
        if TENSOR in tree:
            return tensors[tree[TENSOR]]
        if "__dict__" in tree:
            return {unflatten(k, tensors): unflatten(v, tensors) for k, v in tree["__dict__"]}
        if "__list__" in tree:
            items = [unflatten(v, tensors) for v in tree["__list__"]]
            return tuple(items) if tree.get("tuple") else items
    return tree


def save(root: Path, step: int, state: dict, keep: int = 3, before_manifest: Callable[[], None] = lambda: None) -> Path:
    """Write checkpoint ``step`` from a nested ``state``; keep the newest ``keep``."""
    from safetensors.torch import save as save_tensors

    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:08d}"
    tmp = root / f".tmp-step-{step:08d}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    tensors: dict[str, torch.Tensor] = {}
    tree = flatten(state, "s", tensors)
    write_bytes_atomic(tmp / "tensors.safetensors", save_tensors(tensors))
    write_json_atomic(tmp / "state.json", tree)
    before_manifest()  # tests kill here: a checkpoint without its manifest must never be loaded
    write_json_atomic(tmp / "manifest.json", {f: sha256_file(tmp / f) for f in ("tensors.safetensors", "state.json")})
    if final.exists():
        shutil.rmtree(final)
    os.rename(tmp, final)
    fsync_dir(root)
    for old in sorted(root.glob("step-*"))[:-keep]:
        shutil.rmtree(old)
    return final


def _load_one(folder: Path) -> dict:
    from safetensors.torch import load_file

    manifest = json.loads((folder / "manifest.json").read_text())
    for name, digest in manifest.items():
        if sha256_file(folder / name) != digest:
            raise ValueError(f"{name} does not match its sha256")
    return unflatten(json.loads((folder / "state.json").read_text()), load_file(folder / "tensors.safetensors"))


def load_latest(root: Path, warn: Callable[[str], None]) -> dict | None:
    """The newest checkpoint that verifies, or None if there is none; damaged ones are reported."""
    folders = sorted(root.glob("step-*"), reverse=True) if root.exists() else []
    bad = []
    for folder in folders:
        try:
            state = _load_one(folder)
        except (OSError, ValueError, KeyError) as e:
            warn(f"checkpoint {folder.name} is damaged ({e}); falling back to the previous one")
            bad.append(folder.name)
            continue
        return state
    if bad:
        raise UserError(f"every checkpoint in {root} is damaged ({', '.join(bad)})",
                        "delete the checkpoints folder to start over, or restore it from a backup")
    return None


def rng_state() -> dict:
    """torch's global RNG as a plain list (docs/architecture.md); the batch draws themselves are keyed by step."""
    return {"torch": torch.get_rng_state().tolist()}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
