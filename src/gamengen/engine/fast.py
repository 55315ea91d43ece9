"""Play's fast path: a whole frame (DDIM steps of the guided U-Net, then the decode) as one ONNX
Runtime graph (docs/performance.md).

At these model sizes eager PyTorch spends a frame's time mostly on per-operation overhead
(hundreds of small kernels per U-Net call), not arithmetic. ONNX Runtime runs the same fp32 graph
with fused kernels and little overhead per node: a frame of the bundled model takes about a third
of eager PyTorch's time, and the outputs agree to about 1e-5 (the tests check it).

The graph is exported from the loaded networks when the engine first starts on a model (a few
seconds) and kept in the user's cache folder (``graph_cache_dir``), never next to the model. Its
name is a digest of everything the graph depends on: the weights, the sampling settings, the code
that builds it and the torch/onnx/onnxruntime versions; so a re-trained model or an upgrade never
meets a stale graph. A sidecar holds the graph's sha256: a damaged file is detected and rebuilt.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import time
import warnings
from pathlib import Path

import numpy as np
import torch


def available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnxruntime"))


class FrameGraph(torch.nn.Module):
    """One whole frame: the context's conv_in shares for both CFG branches (once), the DDIM steps of
    the guided U-Net with the schedule's coefficients as constants, and the decode. One graph means
    one call per frame: no Python between the steps, and one thread pool for all of it."""

    def __init__(self, net: torch.nn.Module, codec, schedule, alphas_cumprod: tuple[float, ...], guided: bool = True,
                 residual: bool = False):
        """``schedule``: the solver's (diffusion/sampling.py), over the training schedule ``alphas_cumprod``;
        ``residual``: the model's DenoiserConfig.residual."""
        from ..diffusion.denoiser import ContextShares, GuidedStep, schedule_log_sigmas

        super().__init__()
        log_sigmas = schedule_log_sigmas(alphas_cumprod) if residual else None
        self.shares, self.step, self.ae = ContextShares(net), GuidedStep(net, guided, log_sigmas), codec.ae
        self.codec, self.schedule, self.alphas_cumprod, self.residual = codec, schedule, alphas_cumprod, residual

    def forward(self, context: torch.Tensor, actions: torch.Tensor, bucket: torch.Tensor, guidance: torch.Tensor,
                noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """context (1, N, C, h, w), actions (1, N), bucket (1,), guidance (), noise (1, C, h, w) ->
        the next latent (1, C, h, w) and its decoded pixels (1, 3, H', W') in [-1, 1]."""
        from ..diffusion.sampling import solve

        shares = self.shares(context)
        last = context[:, -1]
        z = solve(lambda x, t: self.step(x, t, shares, last, actions, bucket, guidance), noise, self.schedule,
                  self.alphas_cumprod)
        return z, self.codec.decode_pixels(z)


INPUTS = ("context", "actions", "bucket", "guidance", "noise")


OPSET = 17


def export(graph: FrameGraph, example: tuple) -> bytes:
    """The frame graph at these example inputs (fixed shapes) as ONNX bytes.

    The TorchScript-tracing exporter takes about 2 s for the bundled model; torch.export's (the
    newer default) takes 11-15 s for the same graph, which runs no faster. Tracing is safe here
    because every shape is fixed and no input's value steers Python control flow (the tests check
    the graph against the reference path on other inputs than these)."""
    graph.eval()
    buf = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer warns at every shape check diffusers makes
        torch.onnx.export(graph, example, buf, dynamo=False, opset_version=OPSET, input_names=list(INPUTS),
                          output_names=["latent", "pixels"])
    return buf.getvalue()


def graph_cache_dir() -> Path:
    """``$GAMENGEN_CACHE/onnx``, else the user's cache folder (``$XDG_CACHE_HOME`` or ~/.cache)."""
    root = os.environ.get("GAMENGEN_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gamengen"
    return Path(root) / "onnx"


def graph_key(graph: FrameGraph, example: tuple) -> str:
    """A digest of everything the exported graph depends on."""
    import diffusers
    import onnx
    import onnxruntime

    from ..diffusion import denoiser, sampling
    from ..models import unet

    h = hashlib.sha256()
    for name, t in sorted(graph.state_dict().items()):  # the U-Net's and the AE's weights
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    settings = {"scale": graph.codec.scale, "guided": graph.step.guided, "residual": graph.residual, "schedule": repr(graph.schedule),
                "alphas": repr(graph.alphas_cumprod), "shapes": [list(x.shape) for x in example], "opset": OPSET,
                "versions": [torch.__version__, diffusers.__version__, onnx.__version__, onnxruntime.__version__]}
    h.update(json.dumps(settings, sort_keys=True, default=str).encode())
    for source in (__file__, denoiser.__file__, sampling.__file__, unet.__file__):  # the code that builds it
        h.update(Path(source).read_bytes())
    return h.hexdigest()[:32]


def cached_graph(graph: FrameGraph, example: tuple) -> tuple[bytes, str]:
    """The graph's ONNX bytes from the cache, else exported (and cached when the folder is writable).
    -> (bytes, "cache" | "exported")."""
    from ..atomic import write_bytes_atomic, write_json_atomic

    folder = graph_cache_dir()
    key = graph_key(graph, example)
    path, sidecar = folder / f"{key}.onnx", folder / f"{key}.json"
    try:
        data = path.read_bytes()
        if json.loads(sidecar.read_text())["sha256"] == hashlib.sha256(data).hexdigest():
            return data, "cache"
    except (OSError, ValueError, KeyError, TypeError):
        pass  # missing, damaged or half-written: export again
    data = export(graph, example)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(path, data)
        write_json_atomic(sidecar, {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)})  # last
    except OSError:
        pass  # a read-only home still plays, exporting at each start
    return data, "exported"


def open_graph(model: bytes, threads: int):
    """Open ONNX bytes in ONNX Runtime for play: fixed threads, no spinning."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    # ORT's worker threads spin between runs by default; on 2 cores they then take time from torch's
    # threads and the server's (a frame took 81 ms spinning, 33 ms not, in an early trial).
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


class OnnxPath:
    """A model's frame graph in ONNX Runtime. Sessions are thread-safe, so players share one."""

    def __init__(self, net: torch.nn.Module, codec, schedule, alphas_cumprod: tuple[float, ...], context: int,
                 guided: bool = True, threads: int | None = None, residual: bool = False):
        C, h, w = codec.latent_shape()
        example = (torch.zeros(1, context, C, h, w), torch.zeros(1, context, dtype=torch.long),
                   torch.zeros(1, dtype=torch.long), torch.tensor(1.5), torch.zeros(1, C, h, w))
        graph = FrameGraph(net, codec, schedule, alphas_cumprod, guided, residual)
        model, self.source = cached_graph(graph, example)  # source: "cache" or "exported"
        self.graph = open_graph(model, threads or torch.get_num_threads())
        self.codec = codec
        self.inputs = [i.name for i in self.graph.get_inputs()]  # an unguided graph has no guidance input

    def frame(self, context: torch.Tensor, actions: torch.Tensor, bucket: torch.Tensor, guidance: float,
              noise: torch.Tensor) -> tuple[torch.Tensor, np.ndarray, dict[str, float]]:
        """-> the next latent (1, C, h, w), frame (1, H, W, 3) uint8 and ms per stage, as the reference
        path (engine/runtime.EagerPath) makes them."""
        t0 = time.perf_counter()
        given = dict(zip(INPUTS, (context, actions, bucket, torch.tensor(guidance, dtype=torch.float32), noise)))
        z, pixels = self.graph.run(None, {k: np.ascontiguousarray(given[k].numpy()) for k in self.inputs})
        ms = (time.perf_counter() - t0) * 1e3
        return torch.from_numpy(z), self.codec.to_frames(torch.from_numpy(pixels)), {"frame graph": ms}
