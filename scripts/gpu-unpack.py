"""Unpack what scripts/gpu-train.sh sent back into playable model folders.

    python scripts/gpu-unpack.py OUT/models.tar.part-* --to runs/gpu

The weights travel in fp16 (so that each file stays under 16 MB); they come back as fp32 (the
fp16 rounding stays), and each world model gets its autoencoder's folder as ``ae/`` again.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import tarfile
from pathlib import Path

from safetensors.torch import load_file, save_file


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("parts", nargs="+", type=Path, help="models.tar.part-* in order")
    ap.add_argument("--to", type=Path, required=True, help="folder for one folder per run")
    args = ap.parse_args()
    data = b"".join(p.read_bytes() for p in sorted(args.parts))
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        t.extractall(args.to, filter="data")
    root = args.to / "gpu-run"
    for f in root.rglob("*.safetensors"):
        save_file({k: v.float() if v.is_floating_point() else v for k, v in load_file(f).items()}, f)
    for run in sorted(root.iterdir()):
        model = run / "model"
        if run.name.startswith("ae-") or not model.exists() or (model / "ae").exists():
            continue
        cfg = json.loads((run / "config.json").read_text())
        ae = cfg.get("ae") or json.loads((root / Path(cfg["teacher"]).parent.name / "config.json").read_text())["ae"]
        shutil.copytree(root / Path(ae).name / "model", model / "ae")
        print(f"{model}: autoencoder from {Path(ae).name}")


if __name__ == "__main__":
    main()
