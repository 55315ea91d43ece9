"""`NeuralWorld`: play a trained world model one frame at a time (DESIGN §6, paper §3.3).

It keeps a ring of the last N context latents and the actions taken after them. ``step(action)``
samples the next latent with DDIM (4 steps, CFG on the history), decodes it, and pushes it into
the ring: autoregression happens in latent space only, as in the paper.

Time indexing is the training windows' (DESIGN §3.1): to make frame n the model sees latents of
frames n-N..n-1 and actions n-N..n-1, where action n-1 is the one just pressed.
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from ..errors import UserError


@dataclass
class EngineConfig:
    steps: int | None = None  # DDIM steps; None = the model's: 4 (paper §3.3: as good as 20+), 1 if distilled
    guidance: float | None = None  # CFG weight on the history; None = the model's (1.5)
    noise_level: float | None = None  # context noise level told to the model; None = the model's
    # "onnx": the U-Net step and the decoder run as ONNX Runtime graphs (engine/fast.py), the play
    # default; "torch": eager PyTorch fp32, the reference path the fast one is measured against.
    runtime: str = "onnx"


def read_meta(model_dir: str | Path) -> dict:
    """A world model folder's gamengen_wm.json (game, actions, sampling settings)."""
    from ..train.world_model import WM_META

    path = Path(model_dir) / WM_META
    if not path.is_file():
        raise UserError(f"no world model in {model_dir} ({WM_META} missing)",
                        "pass the model/ folder that `gamengen train` writes")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        raise UserError(f"{path} is not valid JSON", "re-export the model with `gamengen train`") from None


def sampling_steps(meta: dict, steps: int | None = None) -> int:
    """DDIM steps per frame: those asked for, else the model's (4, paper §3.3; 1 for a distilled one)."""
    return int(steps or meta.get("sampling_steps", 4))


class NeuralWorld:
    def __init__(self, model_dir: str | Path, config: EngineConfig | None = None):
        from ..diffusion.denoiser import Denoiser, DenoiserConfig
        from ..models.autoencoder import FrameCodec
        from ..models.unet import ActionConditionedUNet

        model_dir = Path(model_dir)
        self.meta = read_meta(model_dir)
        self.config = config or EngineConfig()
        self.codec = FrameCodec.load(model_dir / "ae")
        try:
            net = ActionConditionedUNet.from_pretrained(model_dir, use_safetensors=True).eval()
        except (OSError, ValueError, RuntimeError) as e:
            raise UserError(f"the world model in {model_dir} does not load ({str(e)[:120]})",
                            "re-export it with `gamengen train`") from None
        self.denoiser = Denoiser(net, DenoiserConfig(**self.meta["denoiser"]))
        self.schedule = self.denoiser.sampling_schedule()
        self.context = int(self.meta["context"])
        self.steps = sampling_steps(self.meta, self.config.steps)
        self.fast = self._fast_path(net)
        self.actions = list(self.meta["actions"])
        self.n_actions = len(self.actions)
        self.generator = torch.Generator().manual_seed(0)
        self.latents = None  # (N, C, h, w): frames n-N..n-1
        self.past_actions = None  # (N-1,): the actions taken after the first N-1 of them
        self.timings: dict[str, float] = {}  # ms of the last step per stage, for the HUD and `bench play`

    def _fast_path(self, net):
        from . import fast

        runtime = self.config.runtime
        if runtime == "torch":
            return None
        if runtime != "onnx":
            raise UserError(f"unknown runtime '{runtime}'", "use onnx (fast, the default) or torch (the reference)")
        if not fast.available():
            raise UserError("onnx or onnxruntime is not installed", "pip install onnx onnxruntime, or pass --runtime torch")
        guidance, _ = self.denoiser.sampling_conditions(1, self.config.guidance)
        return fast.OnnxPath(net, self.codec, self.schedule, self.context, self.steps, guided=guidance != 1.0)

    def session(self) -> "NeuralWorld":
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
        from ..diffusion.sampling import sample_ddim

        if self.latents is None:
            raise RuntimeError("call reset() first")
        if not 0 <= int(action) < self.n_actions:
            raise ValueError(f"action {action} is not in 0..{self.n_actions - 1}")
        acts = torch.cat([self.past_actions, torch.tensor([int(action)])])  # (N,)
        c = self.config
        noise = torch.randn((1, *self.latents.shape[1:]), generator=self.generator)
        t0 = time.perf_counter()
        if self.fast is not None:
            w, bucket = self.denoiser.sampling_conditions(1, c.guidance, c.noise_level)
            z, frames = self.fast.frame(self.latents[None], acts[None], bucket, w, noise)
            self.timings = {"frame graph": (time.perf_counter() - t0) * 1e3}
        else:
            denoise = self.denoiser.guided(self.latents[None], acts[None], c.guidance, c.noise_level)
            z = sample_ddim(denoise, noise, steps=self.steps, schedule=self.schedule)  # (1, C, h, w)
            t1 = time.perf_counter()
            frames = self.codec.decode(z)
            self.timings = {"denoise": (t1 - t0) * 1e3, "decode": (time.perf_counter() - t1) * 1e3}
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
