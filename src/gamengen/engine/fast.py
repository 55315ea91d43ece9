"""Play's fast path: a whole frame (DDIM steps of the guided U-Net, then the decode) as one ONNX
Runtime graph (docs/performance.md).

At these model sizes eager PyTorch spends a frame's time mostly on per-operation overhead
(hundreds of small kernels per U-Net call), not arithmetic. ONNX Runtime runs the same fp32 graph
with fused kernels and little overhead per node: a frame of the bundled model takes about a third
of eager PyTorch's time, and the outputs agree to about 1e-5 (the tests check it).

The graph is exported from the loaded networks in memory when the engine starts (a few seconds),
so nothing is written next to a user's model and a re-trained model never meets a stale graph.
"""

from __future__ import annotations

import copy
import importlib.util
import io
import warnings

import numpy as np
import torch


def available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnxruntime"))


class FrameGraph(torch.nn.Module):
    """One whole frame: the context's conv_in shares for both CFG branches (once), the DDIM steps of
    the guided U-Net with the schedule's coefficients as constants, and the decode. One graph means
    one call per frame: no Python between the steps, and one thread pool for all of it."""

    def __init__(self, net: torch.nn.Module, codec, schedule, steps: int, guided: bool = True):
        from ..diffusion.denoiser import ContextShares, GuidedStep
        from ..diffusion.sampling import ddim_timesteps

        super().__init__()
        self.shares, self.step, self.ae = ContextShares(net), GuidedStep(net, guided), codec.ae
        self.scale, self.schedule = codec.scale, schedule
        self.timesteps = ddim_timesteps(schedule, steps)

    def forward(self, context: torch.Tensor, actions: torch.Tensor, bucket: torch.Tensor, guidance: torch.Tensor,
                noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """context (1, N, C, h, w), actions (1, N), bucket (1,), guidance (), noise (1, C, h, w) ->
        the next latent (1, C, h, w) and its decoded pixels (1, 3, H', W') in [-1, 1]."""
        from ..diffusion.sampling import ddim_loop

        shares = self.shares(context)
        z = ddim_loop(lambda x, t: self.step(x, t, shares, actions, bucket, guidance), noise, self.timesteps,
                      self.schedule)
        return z, self.ae.decode(z / self.scale).sample


INPUTS = ("context", "actions", "bucket", "guidance", "noise")


def session(graph: FrameGraph, example: tuple, threads: int):
    """Export the frame graph at these example inputs (fixed shapes) and open it in ONNX Runtime.

    The TorchScript-tracing exporter takes about 2 s for the bundled model; torch.export's (the
    newer default) takes 11-15 s for the same graph, which runs no faster. Tracing is safe here
    because every shape is fixed and no input's value steers Python control flow (the tests check
    the graph against the reference path on other inputs than these)."""
    import onnxruntime as ort

    graph.eval()
    buf = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer warns at every shape check diffusers makes
        torch.onnx.export(graph, example, buf, dynamo=False, opset_version=17, input_names=list(INPUTS),
                          output_names=["latent", "pixels"])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    # ORT's worker threads spin between runs by default; on 2 cores they then take time from torch's
    # threads and the server's (a frame took 81 ms spinning, 33 ms not, in an early trial).
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(buf.getvalue(), opts, providers=["CPUExecutionProvider"])


class OnnxPath:
    """A model's frame graph in ONNX Runtime. Sessions are thread-safe, so players share one."""

    def __init__(self, net: torch.nn.Module, codec, schedule, context: int, steps: int, guided: bool = True,
                 threads: int | None = None):
        C, h, w = codec.latent_shape()
        example = (torch.zeros(1, context, C, h, w), torch.zeros(1, context, dtype=torch.long),
                   torch.zeros(1, dtype=torch.long), torch.tensor(1.5), torch.zeros(1, C, h, w))
        self.graph = session(FrameGraph(net, codec, copy.deepcopy(schedule), steps, guided), example,
                             threads or torch.get_num_threads())
        self.codec = codec
        self.inputs = [i.name for i in self.graph.get_inputs()]  # an unguided graph has no guidance input

    def frame(self, context: torch.Tensor, actions: torch.Tensor, bucket: torch.Tensor, guidance: float,
              noise: torch.Tensor) -> tuple[torch.Tensor, np.ndarray]:
        """-> the next latent (1, C, h, w) and frame (1, H, W, 3) uint8, as the reference path makes them."""
        given = dict(zip(INPUTS, (context, actions, bucket, torch.tensor(guidance, dtype=torch.float32), noise)))
        z, pixels = self.graph.run(None, {k: np.ascontiguousarray(given[k].numpy()) for k in self.inputs})
        return torch.from_numpy(z), self.codec.to_frames(torch.from_numpy(pixels))
