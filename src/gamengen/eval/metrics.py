"""Frame metrics shared by every evaluation (docs/evaluation.md): PSNR, SSIM, LPIPS and the Fréchet distance.

PSNR and SSIM come from torchmetrics. LPIPS is torchmetrics' too, but its AlexNet backbone needs
torchvision and ImageNet weights that we never download at run time: when either is missing,
``perceptual()`` says why and the reports print "unavailable" instead of a number.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import torch

MAX_DB = 100.0  # identical frames are capped, not infinite


def _float(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(x, np.float32))


def psnr(pred: np.ndarray, truth: np.ndarray) -> float:
    """PSNR in dB of two uint8 images (any shape), over all pixels and channels."""
    from torchmetrics.functional.image import peak_signal_noise_ratio

    if np.array_equal(pred, truth):
        return MAX_DB
    return min(MAX_DB, float(peak_signal_noise_ratio(_float(pred), _float(truth), data_range=255.0)))


# DOOM's status bar is the bottom 32 of its 200 rows, 1/6 of the frame at any of our resolutions
STATUS_BAR_SHARE = 32 / 200


def view_rows(height: int) -> int:
    """Rows above DOOM's status bar in a frame of ``height`` rows."""
    return height - round(height * STATUS_BAR_SHARE)


def status_bar(frame: np.ndarray) -> np.ndarray:
    """The bottom rows that hold DOOM's status bar, of (..., H, W, 3) frames."""
    return frame[..., view_rows(frame.shape[-3]):, :, :]


def ssim(pred: np.ndarray, truth: np.ndarray) -> float:
    """SSIM of two (H, W, 3) uint8 frames (torchmetrics' Gaussian window)."""
    from torchmetrics.functional.image import structural_similarity_index_measure

    p, t = (_float(x).permute(2, 0, 1)[None] / 255.0 for x in (pred, truth))
    return float(structural_similarity_index_measure(p, t, data_range=1.0))


def summary(values) -> dict:
    a = np.asarray(list(values), np.float64)
    if not len(a):
        return {"n": 0}
    return {"n": int(len(a)), "mean": float(a.mean()), "std": float(a.std()), "median": float(np.median(a))}


def alexnet_weights_path() -> Path:
    """Where torchvision keeps AlexNet's ImageNet weights (torch hub cache; TORCH_HOME moves it)."""
    return Path(torch.hub.get_dir()) / "checkpoints" / "alexnet-owt-7be5be79.pth"


class Perceptual:
    """LPIPS (AlexNet) on (H, W, 3) uint8 frames; lower is closer."""

    def __init__(self, metric):
        self.metric = metric

    @torch.no_grad()
    def __call__(self, pred: np.ndarray, truth: np.ndarray) -> float:
        p, t = (_float(x).permute(2, 0, 1)[None] / 127.5 - 1.0 for x in (pred, truth))
        return float(self.metric(p.clamp(-1, 1), t.clamp(-1, 1)))


def perceptual() -> tuple[Perceptual | None, str]:
    """(LPIPS, "") when it can run offline, else (None, the reason it is unavailable)."""
    try:
        importlib.import_module("torchvision")
    except Exception as e:  # not installed, or a build for another torch (its ops fail to load)
        return None, f"unavailable: torchvision does not import ({type(e).__name__}); install the build matching your torch"
    path = alexnet_weights_path()
    if not path.is_file():
        return None, f"unavailable: AlexNet weights not found at {path} (we never download them)"
    try:
        from torchmetrics.image.lpip import LearnedPerceptualImagePatchSimilarity

        metric = LearnedPerceptualImagePatchSimilarity(net_type="alex", normalize=False).eval()
    except Exception as e:
        return None, f"unavailable: LPIPS did not load ({type(e).__name__}: {str(e)[:100]})"
    return Perceptual(metric), ""


def frechet_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Fréchet distance between Gaussians fitted to two feature sets (rows are samples): the
    statistic behind FID and FVD."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    mu = a.mean(0) - b.mean(0)
    ca, cb = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    # tr(sqrt(ca cb)) from the eigenvalues of sqrt(ca) cb sqrt(ca), which is symmetric PSD
    w, v = np.linalg.eigh(ca)
    root = (v * np.sqrt(np.clip(w, 0, None))) @ v.T
    m = root @ cb @ root
    tr = np.sqrt(np.clip(np.linalg.eigvalsh((m + m.T) / 2), 0, None)).sum()
    return float(mu @ mu + np.trace(ca) + np.trace(cb) - 2 * tr)
