"""Crash-safe file writes (docs/architecture.md): temp file in the same folder, fsync, rename, fsync folder."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fsync_dir(path: str | os.PathLike) -> None:
    """Make a rename or a new entry in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def write_json_atomic(path: str | os.PathLike, obj) -> None:
    write_bytes_atomic(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def write_folder_atomic(folder: str | os.PathLike, write) -> None:
    """``write(tmp)`` a whole folder into a temporary sibling, make it durable, then rename it into
    place; an old folder is renamed aside first and removed last. A crash between the two renames
    leaves the old folder aside (``.NAME.old-PID``): the next call puts it back before anything
    else, so the folder is lost only while no call runs. Leftovers of crashed calls go."""
    import shutil

    folder = Path(folder).absolute()
    folder.parent.mkdir(parents=True, exist_ok=True)
    aside = sorted(folder.parent.glob(f".{folder.name}.old-*"))
    if aside and not folder.exists():
        os.replace(aside[-1], folder)  # a crash between the renames: the old folder comes back
        fsync_dir(folder.parent)
    for stale in [*folder.parent.glob(f".{folder.name}.tmp-*"), *folder.parent.glob(f".{folder.name}.old-*")]:
        shutil.rmtree(stale, ignore_errors=True)
    tmp = folder.with_name(f".{folder.name}.tmp-{os.getpid()}")
    old = folder.with_name(f".{folder.name}.old-{os.getpid()}")
    try:
        write(tmp)
        for path in [*sorted(tmp.rglob("*"), reverse=True), tmp]:  # files before the folders that hold them
            if path.is_dir():
                fsync_dir(path)
            else:
                with open(path, "rb") as f:
                    os.fsync(f.fileno())
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if folder.exists():
        os.replace(folder, old)
    os.replace(tmp, folder)
    fsync_dir(folder.parent)
    shutil.rmtree(old, ignore_errors=True)


def append_line_durable(path: str | os.PathLike, line: str) -> None:
    """Append one JSON line with a single write(2) on an O_APPEND descriptor, then fsync.

    A single small append either lands whole or not at all when the process is killed, so a
    reader never sees half a line from a SIGKILL (a power cut can still tear it; readers say so).
    """
    data = (line.rstrip("\n") + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def write_png(path: str | os.PathLike, image) -> None:
    """An (H, W, 3) uint8 array as a PNG, atomically; creates the folder."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, buf.getvalue())


def write_figure(path: str | os.PathLike, fig, dpi: int = 110) -> None:
    """A matplotlib figure as a PNG, atomically; closes the figure."""
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    write_bytes_atomic(path, buf.getvalue())
