"""`gamengen data info | preview | export`: look at a store and hand it to other tools."""

from __future__ import annotations

import csv
import os
from collections import Counter
from pathlib import Path
from typing import Callable

import numpy as np

from ..atomic import write_json_atomic
from ..errors import UserError
from .store import EpisodeRecord, Store, read_events, read_labels
from .video import overlay, write_video


def _disk_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def store_info(store: Store) -> dict:
    spec = store.spec
    records = store.episodes()
    lengths = np.array([r.length for r in records], np.int64)
    returns = np.array([r.meta.get("return", np.nan) for r in records], np.float64)
    frames = int(lengths.sum())
    disk = sum(_disk_bytes(store.root / r.path) for r in records)
    raw = frames * spec.height * spec.width * 3 * (1 + len(spec.images))
    return {
        "store": str(store.root),
        "env_id": spec.env_id,
        "resolution": f"{spec.width}x{spec.height}",
        "frame_skip": spec.frame_skip,
        "fps": spec.fps,
        "actions": list(spec.action_set.names),
        "variables": list(spec.variables),
        "images": ["frames", *spec.images],
        "shards": store.shards(),
        "episodes": len(records),
        "frames": frames,
        "episode_length": {"min": int(lengths.min()), "mean": float(lengths.mean()), "max": int(lengths.max())}
        if len(records) else None,
        "return_mean": float(np.nanmean(returns)) if len(records) else None,
        "policies": dict(Counter(r.meta.get("policy", "?") for r in records)),
        "terminated": sum(bool(r.meta.get("terminated")) for r in records),
        "bytes_on_disk": disk,
        "bytes_raw": raw,
        "compression_ratio": raw / disk if disk else None,
        "unlisted_folders": len(store.unlisted()),
        **({"labels": True} if spec.labels else {}),
        **({"events": _events_info(store, records)} if spec.events else {}),
    }


def _events_info(store: Store, records: list[EpisodeRecord]) -> dict:
    """How a store's events were fired, and how many of each kind its episodes hold."""
    spec = store.spec
    fired = Counter()
    for rec in records:
        fired.update(int(k) for k in read_events(store.open_episode(rec)) if k)
    return {"every_s": list(spec.event_period_s or ()), "cleared_s_before": spec.event_clear_s,
            "fired": {e.name: fired[k] for k, e in enumerate(spec.events) if k}}


def preview_episode(store: Store, rec: EpisodeRecord, out: Path, start: int = 0, count: int = 300,
                    scale: int = 3) -> int:
    """Write frames [start, start+count) of an episode with step, action and reward written on them."""
    if not 0 <= start < rec.length:
        raise UserError(f"--start {start} is outside episode {rec.id} (length {rec.length})",
                        f"use a start in 0..{rec.length - 1}")
    g = store.open_episode(rec)
    end = min(rec.length, start + count)
    frames = g["frames"][start:end]
    actions, rewards = g["actions"][start:end], g["rewards"][start:end]
    names = store.spec.action_set.names
    shown = (overlay(frames[i], [f"{rec.id}  t={start + i}  r={rewards[i]:+g}", f"action: {names[actions[i]]}"], scale)
             for i in range(len(frames)))
    write_video(out, shown, store.spec.fps)
    return end - start


def export_store(store: Store, out: Path, crf: int = 18, report: Callable[[int], None] = lambda n: None) -> dict:
    """Write one mp4 per episode plus actions.csv / episodes.csv that any tool can read."""
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise UserError(f"export folder {out} is not empty", "pick a new --out folder")
    try:
        (out / "videos").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create {out}: {e.strerror}", "pick a writable --out folder") from None
    spec = store.spec
    records = store.episodes()
    # Format 2's optional per-step data: the event fired with the step's action (its name), and the
    # objects in view in its frame as NAME=COUNT pairs joined by ";".
    step_cols = ["episode", "t", "action", "action_name", "reward", "terminated", "truncated", *spec.variables,
                 *(["event"] if spec.events else []), *(["in_view"] if spec.labels else [])]
    ep_cols = ["episode", "video", "length", "policy", "return", "terminated", "truncated"]
    tmp_steps, tmp_eps = out / ".actions.csv.tmp", out / ".episodes.csv.tmp"
    with open(tmp_steps, "w", newline="") as fs, open(tmp_eps, "w", newline="") as fe:
        steps_csv, eps_csv = csv.writer(fs), csv.writer(fe)
        steps_csv.writerow(step_cols)
        eps_csv.writerow(ep_cols)
        for rec in records:
            g = store.open_episode(rec)
            name = rec.path.replace("/", "-")
            video = f"videos/{name}.mp4"
            frames = g["frames"]
            write_video(out / video, (frames[i] for i in range(rec.length)), spec.fps, crf=crf)
            a, r = g["actions"][:], g["rewards"][:]
            term, trunc, var = g["terminated"][:], g["truncated"][:], g["game_variables"][:]
            events, labels = read_events(g), read_labels(g)
            for t in range(rec.length):
                extra = []  # (an episode missing an array the store names gets empty cells; verify reports it)
                if spec.events:
                    extra.append(spec.events[events[t]].name if events is not None else "")
                if spec.labels:
                    extra.append(";".join(f"{n}={int(c)}" for n, c in zip(labels[0], labels[1][t]) if c)
                                 if labels is not None else "")
                steps_csv.writerow([name, t, int(a[t]), spec.action_set.names[a[t]], float(r[t]), int(term[t]),
                                    int(trunc[t]), *map(float, var[t]), *extra])
            eps_csv.writerow([name, video, rec.length, rec.meta.get("policy", ""), rec.meta.get("return", ""),
                              int(term[-1]), int(trunc[-1])])
            report(1)
        for f in (fs, fe):
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp_steps, out / "actions.csv")
    os.replace(tmp_eps, out / "episodes.csv")
    write_json_atomic(out / "store.json", spec.to_json())
    return {"episodes": len(records), "out": str(out)}


def _link_or_copy(src, dst) -> None:
    import shutil

    try:
        os.link(src, dst)
    except OSError:  # another file system
        shutil.copy2(src, dst)


def snapshot_store(store: Store, out: Path) -> tuple[int, int]:
    """A frozen copy of the episodes a store lists now, for training on a store that is still being
    written (an agent run). Episode files never change once listed, so they are hard links (no
    extra disk); manifests and specs are copied, so later appends to the source do not show.
    Returns (episodes, frames)."""
    import shutil

    out = Path(out)
    if out.exists():
        raise UserError(f"{out} already exists", "pick a new folder for the snapshot")
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    episodes = frames = 0
    try:
        tmp.mkdir(parents=True)
        shutil.copy2(store.root / "store.json", tmp / "store.json")
        for shard in store.shards():
            records = [r for r in store.episodes() if r.shard == shard]
            (tmp / shard).mkdir()
            shutil.copy2(store.root / shard / "shard.json", tmp / shard / "shard.json")
            for rec in records:
                shutil.copytree(store.root / rec.path, tmp / rec.path, copy_function=_link_or_copy)
            lines = (store.root / shard / "manifest.jsonl").read_text().splitlines()[:len(records)]
            (tmp / shard / "manifest.jsonl").write_text("".join(line + "\n" for line in lines))
            episodes += len(records)
            frames += sum(r.length for r in records)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return episodes, frames
