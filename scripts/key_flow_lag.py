"""Do a clip dataset's keys line up with its frames (issue 19)?

    .venv/bin/python scripts/key_flow_lag.py DATASET [DATASET ...]

DATASET is a clip dataset curated from trajectory stores (`gamengen curate`'s output, e.g.
data/control/freedoom1-E1M1). For every pair of consecutive frames j -> j + 1 it takes the mean
horizontal flow (curation's Farneback, `curate/stages.flow_fields`) over the view (rows 10-89 of 120: the status bar left out) and sets it
against the turn keys (TURN_LEFT share minus TURN_RIGHT share) of key row j + lag. Row k of a clip's
keys is meant to lead from frame k to k + 1, so the correlation should peak at lag 0; a peak
elsewhere would mean keys and frames are shifted against each other, and no InstructNet could
learn from them.
"""

from __future__ import annotations

import sys

import cv2
import numpy as np

from gamengen.curate.dataset import ClipDataset
from gamengen.curate.stages import flow_fields


def lags(folder: str) -> None:
    ds = ClipDataset.open(folder)
    turns, flows = [], []
    for i in range(len(ds)):
        k = ds.keys(i)
        if k is None or "TURN_LEFT" not in k[0] or "TURN_RIGHT" not in k[0]:
            continue
        names, held = k
        gray = np.stack([cv2.cvtColor(f, cv2.COLOR_RGB2GRAY) for f in ds.frames(i)])  # native size, not REF_WIDTH
        flows.append(flow_fields(gray)[:, 10:90, :, 0].mean((1, 2)))
        turns.append(held[:, names.index("TURN_LEFT")] - held[:, names.index("TURN_RIGHT")])
    if not turns:
        print(f"{folder}: no clip records both turn keys")
        return
    t, u = np.array(turns), np.array(flows)  # (N, F) key rows, (N, F - 1) frame pairs
    print(f"{folder}: {len(t)} clips; flow of frame pair j (px per frame; + = the picture moves right, as when "
          "the view turns left) against key row j + lag")
    for lag in range(-3, 4):
        js = [j for j in range(u.shape[1]) if 0 <= j + lag < t.shape[1]]
        a, b = np.concatenate([t[:, j + lag] for j in js]), np.concatenate([u[:, j] for j in js])
        print(f"  lag {lag:+d}: correlation {np.corrcoef(a, b)[0, 1]:+.3f}; mean flow where TURN_LEFT {b[a > 0.5].mean():+.2f}, "
              f"TURN_RIGHT {b[a < -0.5].mean():+.2f}, neither {b[np.abs(a) < 0.5].mean():+.2f}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for folder in sys.argv[1:]:
        lags(folder)
