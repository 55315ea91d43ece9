"""How the engine runs a frame: two runtimes behind one interface.

    runtime.frame(context (1, N, C, h, w), actions (1, N), bucket (1,), guidance, noise (1, C, h, w))
        -> (the next latent (1, C, h, w), its frame (1, H, W, 3) uint8, ms per stage)

``EagerPath`` is the eager PyTorch fp32 reference; ``engine.fast.OnnxPath`` runs the same frame as one
ONNX Runtime graph (play's default). Both sample with the model's solver (diffusion/sampling.py),
guide through ``diffusion.denoiser.cfg_pair`` and decode through ``FrameCodec.decode_pixels``.
"""

from __future__ import annotations

import time
from typing import Protocol

import numpy as np
import torch


class FrameRuntime(Protocol):
    def frame(self, context: torch.Tensor, actions: torch.Tensor, bucket: torch.Tensor, guidance: float,
              noise: torch.Tensor) -> tuple[torch.Tensor, np.ndarray, dict[str, float]]: ...


class EagerPath:
    """The reference: the denoiser's guided model, the solver and the decode in eager PyTorch."""

    def __init__(self, denoiser, codec, schedule):
        self.denoiser, self.codec, self.schedule = denoiser, codec, schedule

    @torch.no_grad()
    def frame(self, context, actions, bucket, guidance, noise):
        from ..diffusion.sampling import solve

        t0 = time.perf_counter()
        model = self.denoiser.guided_by_bucket(context, actions, bucket, guidance)
        z = solve(model, noise, self.schedule, self.denoiser.alphas_cumprod)
        t1 = time.perf_counter()
        frames = self.codec.decode(z)
        return z, frames, {"denoise": (t1 - t0) * 1e3, "decode": (time.perf_counter() - t1) * 1e3}
