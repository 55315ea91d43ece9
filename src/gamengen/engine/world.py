"""`NeuralWorld`: play a trained world model one frame at a time (docs/player.md, paper §3.3).

It keeps a ring of the last N context latents and the actions taken after them. ``step(action)``
samples the next latent with DDIM (4 steps, CFG on the history), decodes it, and pushes it into
the ring: autoregression happens in latent space only, as in the paper.

Time indexing is the training windows' (docs/dataset.md): to make frame n the model sees latents of
frames n-N..n-1 and actions n-N..n-1, where action n-1 is the one just pressed.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from ..errors import UserError
from .runtime import FrameRuntime


@dataclass
class EngineConfig:
    """Overrides of the model's own sampler settings (models/world_model.SamplerConfig), for
    experiments; None keeps the model's."""

    solver: str | None = None  # "ddim" or "euler" (diffusion/sampling.py; the model's: ddim)
    steps: int | None = None  # sampling steps (the model's: 4, paper §3.3; 1 if distilled)
    guidance: float | None = None  # CFG weight on the history (the model's: 1.5; 1 if distilled)
    noise_level: float | None = None  # context noise level told to the model (the model's: 0)
    # "onnx": the U-Net step and the decoder run as ONNX Runtime graphs (engine/fast.py), the play
    # default; "torch": eager PyTorch fp32, the reference path the fast one is measured against.
    runtime: str = "onnx"


def _given(override, own):
    return own if override is None else override


class NeuralWorld:
    def __init__(self, model_dir: str | Path, config: EngineConfig | None = None):
        from ..diffusion.denoiser import Denoiser
        from ..models.world_model import WorldModel

        model = WorldModel.from_pretrained(model_dir)
        self.meta, self.sampler, self.starts, self.codec = model.meta, model.sampler, model.starts, model.codec
        self.config = c = config or EngineConfig()
        self.denoiser = Denoiser(model.net, model.meta.denoiser)
        self.context = model.meta.context
        self.solver = c.solver or model.sampler.solver
        self.steps = int(c.steps or model.sampler.steps)
        self.schedule = self.denoiser.schedule(self.solver, self.steps)
        self.guidance = float(_given(c.guidance, model.sampler.guidance))
        self.noise_level = float(_given(c.noise_level, model.sampler.context_noise_level))
        self.runtime: FrameRuntime = self._runtime(model.net)  # eager reference or ONNX fast path
        self.actions = model.meta.actions
        self.n_actions = len(self.actions)
        self.generator = torch.Generator().manual_seed(0)
        self.latents = None  # (N, C, h, w): frames n-N..n-1
        self.past_actions = None  # (N-1,): the actions taken after the first N-1 of them
        self.timings: dict[str, float] = {}  # ms of the last step per stage, for the HUD and `bench play`

    def _runtime(self, net):
        from . import fast
        from .runtime import EagerPath

        runtime = self.config.runtime
        if runtime == "torch":
            return EagerPath(self.denoiser, self.codec, self.schedule)
        if runtime != "onnx":
            raise UserError(f"unknown runtime '{runtime}'", "use onnx (fast, the default) or torch (the reference)")
        if not fast.available():
            raise UserError("onnx or onnxruntime is not installed", "pip install onnx onnxruntime, or pass --runtime torch")
        return fast.OnnxPath(net, self.codec, self.schedule, self.denoiser.alphas_cumprod, self.context,
                             guided=self.guidance != 1.0, residual=self.denoiser.cfg.residual)

    def for_player(self) -> "NeuralWorld":
        """Another player's world over the same networks (shared, read-only): only the ring, the
        noise generator and the timings are its own."""
        other = copy.copy(self)
        other.generator = torch.Generator().manual_seed(0)
        other.latents = other.past_actions = None
        other.timings = {}
        return other

    def reset(self, frames: np.ndarray, actions: np.ndarray, seed: int = 0) -> np.ndarray:
        """Start from real frames (k, H, W, 3) and the k-1 actions taken between them; returns the
        last frame, which is what the player sees before the first step."""
        frames, actions = np.asarray(frames), np.asarray(actions, np.int64)
        if frames.ndim != 4 or frames.shape[1:] != (self.codec.height, self.codec.width, 3):
            raise UserError(f"start frames of shape {frames.shape} do not fit this model "
                            f"({self.codec.width}x{self.codec.height})", "start from frames of the model's game")
        if len(actions) != len(frames) - 1:
            raise ValueError("reset needs one action between each two frames")
        N = self.context
        frames, actions = frames[-N:], actions[len(actions) - (min(len(frames), N) - 1):]
        z = self.codec.encode(frames)  # (k, C, h, w)
        pad = N - len(z)
        # before the episode start: the first latent repeated, with the "no action" token (as in training)
        self.latents = torch.cat([z[:1].expand(pad, *z.shape[1:]), z]) if pad else z
        self.past_actions = torch.from_numpy(np.concatenate([np.full(pad, self.n_actions, np.int64), actions]))
        self.generator.manual_seed(int(seed))
        return frames[-1]

    def state(self) -> tuple:
        """The ring (latents and actions) as it is now, to branch from it again with ``restore``."""
        return self.latents, self.past_actions

    def restore(self, state: tuple, seed: int = 0) -> None:
        """Go back to a ``state()`` without re-encoding the context (tensors are never changed in place)."""
        self.latents, self.past_actions = state
        self.generator.manual_seed(int(seed))

    @torch.no_grad()
    def step(self, action: int) -> np.ndarray:
        """Press ``action`` after the current frame; returns the next frame (H, W, 3) uint8."""
        if self.latents is None:
            raise RuntimeError("call reset() first")
        if not 0 <= int(action) < self.n_actions:
            raise ValueError(f"action {action} is not in 0..{self.n_actions - 1}")
        acts = torch.cat([self.past_actions, torch.tensor([int(action)])])  # (N,)
        noise = torch.randn((1, *self.latents.shape[1:]), generator=self.generator)
        w, bucket = self.denoiser.sampling_conditions(1, self.guidance, self.noise_level)
        z, frames, self.timings = self.runtime.frame(self.latents[None], acts[None], bucket, w, noise)
        self.latents = torch.cat([self.latents[1:], z])
        self.past_actions = acts[1:]
        return frames[0]


class NeuralEnv(gym.Env):
    """The learned game as a gymnasium env, so agents can train inside it.

    ``starts`` are real (frames, actions) openings; reset picks one with its seed. The model has no
    reward or end, so the reward is 0 and episodes are truncated after ``max_steps``."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, world: NeuralWorld, starts: list[tuple[np.ndarray, np.ndarray]], max_steps: int = 1000,
                 render_mode: str | None = None):
        if not starts:
            raise ValueError("NeuralEnv needs at least one start context")
        self.world, self.starts, self.max_steps = world, starts, max_steps
        self.render_mode = render_mode
        h, w = world.codec.height, world.codec.width
        self.observation_space = gym.spaces.Box(0, 255, (h, w, 3), np.uint8)
        self.action_space = gym.spaces.Discrete(world.n_actions)
        self.frame = None

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        i = int(self.np_random.integers(len(self.starts)))
        frames, actions = self.starts[i]
        self.frame = self.world.reset(frames, actions, seed=int(self.np_random.integers(2**31)))
        self.t = 0
        return self.frame.copy(), {"start": i}

    def step(self, action):
        self.frame = self.world.step(int(action))
        self.t += 1
        return self.frame.copy(), 0.0, False, self.t >= self.max_steps, {}

    def render(self):
        return None if self.frame is None else self.frame.copy()
