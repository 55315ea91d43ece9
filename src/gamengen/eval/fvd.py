"""FVD (Unterthiner et al. 2018) from the I3D detector that video-generation papers share.

The detector is the TorchScript export of the Kinetics-400 I3D used by StyleGAN-V and the
fvd-comparison study (``i3d_torchscript.pt``). We never download it: put the file at
``default_i3d_path()`` (or pass its path) and the reports gain FVD at 16 and 32 frames; without it
they say "unavailable". Clips enter as (B, 3, T, H, W) floats in [-1, 1] and the detector resizes
them to 224x224 itself.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import torch

from .metrics import frechet_distance


def default_i3d_path() -> Path:
    return Path(os.environ.get("GAMENGEN_I3D", Path.home() / ".cache" / "gamengen" / "i3d_torchscript.pt"))


def load_i3d(path: str | Path | None = None):
    """(detector, "") or (None, why FVD is unavailable)."""
    path = Path(path) if path else default_i3d_path()
    if not path.is_file():
        return None, f"unavailable: I3D weights not found at {path} (we never download them)"
    try:
        with warnings.catch_warnings():  # TorchScript is deprecated, but it is the format this detector ships in
            warnings.simplefilter("ignore", DeprecationWarning)
            return torch.jit.load(str(path), map_location="cpu").eval(), ""
    except Exception as e:
        return None, f"unavailable: {path} is not a TorchScript I3D ({type(e).__name__})"


@torch.no_grad()
def i3d_features(detector, clips: np.ndarray, batch: int = 8) -> np.ndarray:
    """(B, T, H, W, 3) uint8 clips -> (B, D) features before the classifier."""
    out = []
    for i in range(0, len(clips), batch):
        x = torch.from_numpy(np.asarray(clips[i:i + batch], np.float32)).permute(0, 4, 1, 2, 3) / 127.5 - 1.0
        out.append(detector(x, rescale=False, resize=True, return_features=True).double().numpy())
    return np.concatenate(out)


def fvd(detector, real: np.ndarray, fake: np.ndarray) -> float:
    """FVD between two sets of clips (B, T, H, W, 3) uint8; needs a few clips per set at least."""
    return frechet_distance(i3d_features(detector, real), i3d_features(detector, fake))
