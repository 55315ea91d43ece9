"""`gamengen data verify`: checksums and structure of every listed episode."""

from __future__ import annotations

from typing import Callable

import numpy as np

from .store import FRAME_CHUNK, Store, tree_sha256

PER_STEP = ("actions", "rewards", "terminated", "truncated", "game_variables")


def verify_store(store: Store, deep: bool = True, report: Callable[[int], None] = lambda n: None) -> tuple[list[str], list[str]]:
    """Return (problems, notes). Problems make verification fail; notes are harmless facts.

    ``deep`` also decodes every chunk, whose crc32c catches a flipped byte even where a chunk's
    bytes were rewritten together with a matching manifest hash.
    """
    problems, notes = [], []
    records = store.episodes()  # a corrupt manifest line raises UserError here
    seen = set()
    for rec in records:
        where = f"episode {rec.path}"
        if rec.path in seen:
            problems.append(f"{where}: listed twice")
        seen.add(rec.path)
        folder = store.root / rec.path
        if not folder.is_dir():
            problems.append(f"{where}: listed in the manifest but its folder is missing")
            report(1)
            continue
        digest = tree_sha256(folder)
        if digest != rec.sha256:
            problems.append(f"{where}: sha256 mismatch (files changed or corrupted since recording)")
        try:
            problems += [f"{where}: {p}" for p in _check_episode(store, rec, deep)]
        except Exception as e:  # any decode failure is a finding, not a crash
            problems.append(f"{where}: unreadable ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
        report(1)
    unlisted = store.unlisted()
    if unlisted:
        notes.append(f"{len(unlisted)} unlisted episode folder(s) (in progress or left by a killed recorder); "
                     "readers ignore them and `gamengen record` cleans them up on resume")
    if not records:
        notes.append("the store lists no episodes yet")
    return problems, notes


def _check_episode(store: Store, rec, deep: bool) -> list[str]:
    spec, out = store.spec, []
    g = store.open_episode(rec)
    T = rec.length
    if g.attrs.get("length") != T:
        out.append(f"attrs length {g.attrs.get('length')} != manifest length {T}")
    for name in ("frames", *spec.images):
        arr = g[name]
        if arr.shape != (T, spec.height, spec.width, 3) or arr.dtype != np.uint8:
            out.append(f"{name} has shape {arr.shape} {arr.dtype}, expected ({T}, {spec.height}, {spec.width}, 3) uint8")
        elif deep:
            for s in range(0, T, FRAME_CHUNK * 8):
                arr[s : s + FRAME_CHUNK * 8]  # decode: zstd + crc32c check of every chunk
    # Format 2's optional arrays: present in every episode of a store whose store.json names them.
    per_step = PER_STEP + (("events",) if spec.events else ()) + (("labels",) if spec.labels else ())
    for name in per_step:
        if name not in g:
            out.append(f"missing array {name}")
        elif g[name].shape[0] != T:
            out.append(f"{name} has {g[name].shape[0]} steps, expected {T}")
    if out:
        return out
    actions = g["actions"][:]
    if actions.min() < 0 or actions.max() >= len(spec.action_set):
        out.append(f"actions outside 0..{len(spec.action_set) - 1}")
    if g["game_variables"].shape[1] != len(spec.variables):
        out.append(f"game_variables has {g['game_variables'].shape[1]} columns, store lists {len(spec.variables)}")
    if spec.events:
        events = g["events"][:]
        if events.min() < 0 or events.max() >= len(spec.events):
            out.append(f"events outside 0..{len(spec.events) - 1} (the store's event vocabulary)")
    if spec.labels and g["labels"].shape[1:] != (max(len(g.attrs.get("label_names", ())), 1),):
        out.append(f"labels has columns {g['labels'].shape[1:]}, label_names lists {len(g.attrs.get('label_names', ()))}")
    ended = g["terminated"][:] | g["truncated"][:]
    if ended[:-1].any() or not ended[-1]:
        out.append("terminated/truncated must be set on the last step only")
    return out
