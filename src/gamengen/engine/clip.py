"""Sampling a clip model: text-to-clip and continuation (GameGen-X §3.3, §3.5).

Both are one Euler integration of the rectified flow from noise (t = 1) to the clip (t = 0) with
classifier-free guidance on the text (§3.5); continuation holds the given frames' latents clean as
the first x latent frames throughout (§3.3's frame mask, x > 0), so the model only makes the rest.
The noise comes from a CPU generator seeded by ``seed``: the same model, prompt and seed give the
same frames.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from ..diffusion.flow import euler_sample, guided
from ..errors import UserError
from ..models.clip_model import ClipModel
from ..models.instruct_model import InstructModel
from ..models.instructnet import ControlInputs, controlled, latent_keys
from ..precision import bf16_autocast


# The CFG weight on InstructNet's controls that every command uses unless told (ours, not the paper's):
# the bundled InstructNet's chunks go the key's own way in 0.68 of held-out cases at 4 and 0.38 at 1
# (docs/gamegen_x.md, "Control guidance, now that the keys are read"); a third branch runs only while a
# key or instruction is given, so with none the chunk is the base's at any weight.
CONTROL_GUIDANCE = 4.0


def check_control_guidance(weight: float) -> None:
    """A UserError for a negative control guidance (it would push the clip away from its controls)."""
    if weight < 0:
        raise UserError(f"control guidance {weight}", "use a control guidance >= 0 (1: none)")


@dataclass
class Steering:
    """InstructNet's control of one continuation (§3.4); each part optional."""

    instruct: InstructModel
    keys: tuple[str, ...] = ()  # held through the whole clip (the generated frames are what they lead to)
    instruction: str | None = None  # an instruction caption (the INS fields: Env, Trans, Light, Act, Misc)
    prompt: np.ndarray | None = None  # (F, H, W, 3) uint8 video prompt of the clip's frames (curate/prompts.py)
    # CFG weight on the controls against InstructNet with them off (diffusion/flow.guided); 1 = none.
    # Ours, not the paper's: InstructNet's key path is weak (docs/gamegen_x.md), and this amplifies it.
    guidance: float = CONTROL_GUIDANCE

    def __post_init__(self):
        check_control_guidance(self.guidance)

    def inputs(self, model: ClipModel) -> ControlInputs:
        """The batch-of-one ControlInputs; a UserError for an unknown key or a prompt of the wrong shape."""
        names, device = self.instruct.meta.key_names, model.net.device
        unknown = [k for k in self.keys if k not in names]
        if unknown:
            raise UserError(f"unknown key {unknown[0]!r}", "use keys this InstructNet knows: " + ", ".join(names))
        m, D = model.meta, model.net.config.text_dim
        held = torch.zeros(1, m.frames, len(names))
        held[..., [names.index(k) for k in self.keys]] = 1
        keys = latent_keys(held, model.codec.vae.temporal_compression)  # (1, L, K)
        if self.instruction is None:
            instruction, mask = torch.zeros(1, 1, D), torch.ones(1, 1, dtype=torch.bool)
        else:
            instruction, mask = model.encode_text(self.instruction)  # (1, Li, D); a UserError for a bad text
        prompt = torch.zeros(1, *model.latent_shape)
        if self.prompt is not None:
            if self.prompt.shape != (m.frames, m.height, m.width, 3) or self.prompt.dtype != np.uint8:
                raise UserError(f"video prompt {self.prompt.shape} {self.prompt.dtype}, the model makes {m.frames} "
                                f"frames of {m.width}x{m.height}", "pass a prompt of the clip's frames")
            with torch.inference_mode():
                prompt = model.codec.encode_clip(self.prompt)[None]

        def on(given: bool) -> torch.Tensor:
            return torch.tensor([given], device=device)

        return ControlInputs(keys.to(device), on(bool(self.keys)), instruction.to(device), mask.to(device),
                             on(self.instruction is not None), prompt.to(device), on(self.prompt is not None))


def context_frames_used(model: ClipModel, given: int) -> int:
    """How many of ``given`` context frames a continuation uses: the most whole latent frames that fit,
    1 + 4k, leaving at least one latent frame to generate. 0 given is a UserError."""
    r = model.codec.vae.temporal_compression
    L = model.latent_shape[0]
    if given < 1:
        raise UserError("a continuation needs at least one context frame", "pass frames to continue from")
    if L < 2:
        raise UserError(f"this model makes {model.meta.frames}-frame clips, too short to continue",
                        "use a model trained on longer clips")
    return 1 + r * min((given - 1) // r, L - 2)


def check_context(model: ClipModel, given: int) -> None:
    """A UserError unless ``given`` context frames are exactly what a continuation holds (1 + 4k, at
    least one latent frame left to make)."""
    if given < 1 or context_frames_used(model, given) != given:
        r, L = model.codec.vae.temporal_compression, model.latent_shape[0]
        fits = ", ".join(str(1 + r * k) for k in range(L - 1))
        raise UserError(f"--context {given}: a continuation holds 1 + {r}k frames clean and generates at least one "
                        "latent frame", f"pass one of {fits}")


@torch.inference_mode()
def sample_latents(model: ClipModel, prompt: str, seed: int, context: torch.Tensor | None, steps: int | None,
                   guidance: float | None, shift: float | None, steer: Steering | None = None,
                   on_step: Callable[[], None] | None = None, context_noise: float | None = None) -> torch.Tensor:
    """context (X, C, h, w) clean latents or None -> the sampled clip's latents (1, L, C, h, w), scaled.
    With ``steer``, InstructNet steers both CFG branches alike, and ``steer.guidance`` != 1 adds
    guidance on the controls (a third branch with them off).
    ``on_step`` is called before each Euler step and may raise to abandon the clip (clip play does
    when the keys change)."""
    s = model.sampler
    steps = s.steps if steps is None else steps
    task_guidance, task_shift = s.for_task(context is not None)
    guidance = task_guidance if guidance is None else guidance
    shift = task_shift if shift is None else shift
    context_noise = s.context_noise if context_noise is None else context_noise
    if steps < 1 or guidance < 0 or shift <= 0 or not 0 <= context_noise < 1:
        raise UserError(f"sampler steps {steps}, guidance {guidance}, shift {shift}, context noise {context_noise}",
                        "use steps >= 1, guidance >= 0 (1: no guidance), shift > 0, context noise in [0, 1)")
    hidden, mask = model.encode_text(prompt)  # (1, Lt, D), (1, Lt); a UserError for a bad prompt
    device = model.net.device
    meta = model.conditions(1)
    cond = {"encoder_hidden_states": hidden.to(device), "encoder_attention_mask": mask.to(device), **meta}
    # The unconditional branch: the same tensors with no real token, which MSDiT reads as its null text.
    uncond = {**cond, "encoder_attention_mask": torch.zeros_like(cond["encoder_attention_mask"])}
    net, unsteered = model.net, None
    if steer is not None:
        given = steer.inputs(model)
        controls = given.as_kwargs()
        unsteered = {**cond, **given.switched_off().as_kwargs()}
        cond, uncond, net = {**cond, **controls}, {**uncond, **controls}, controlled(model.net, steer.instruct.net)
    noise = torch.randn((1, *model.latent_shape), generator=torch.Generator().manual_seed(seed)).to(device)
    ctx = None if context is None else context[None].to(device)
    velocity = guided(net, cond, uncond, guidance, unsteered, steer.guidance if steer else 1.0)
    if on_step is not None:
        def velocity(x, t, v=velocity):
            on_step()
            return v(x, t)
    return euler_sample(velocity, noise, ctx, steps=steps, shift=shift, context_t=context_noise)


@torch.inference_mode()
def _sample(model: ClipModel, prompt: str, seed: int, context: torch.Tensor | None, steps: int | None,
            guidance: float | None, shift: float | None, steer: Steering | None = None,
            on_step: Callable[[], None] | None = None, last: int | None = None,
            context_noise: float | None = None, bf16: bool = False) -> np.ndarray:
    """sample_latents, decoded: uint8 (F, H, W, 3), or its last ``last`` frames. ``bf16``: the networks
    run under bf16 autocast (the Euler state stays fp32)."""
    with bf16_autocast(bf16):
        x0 = sample_latents(model, prompt, seed, context, steps, guidance, shift, steer, on_step, context_noise)
        F = model.meta.frames
        return model.codec.decode_clip(x0[0], first=0 if last is None else F - last)  # (L, C, h, w) -> (F, H, W, 3)


def generate(model: ClipModel, prompt: str, seed: int = 0, steps: int | None = None, guidance: float | None = None,
             shift: float | None = None, on_step: Callable[[], None] | None = None, bf16: bool = False) -> np.ndarray:
    """Text-to-clip: uint8 (F, H, W, 3) at the model's size. None takes the model's sampler setting;
    ``bf16``: run the networks under bf16 autocast (a CPU with bf16 units: precision.native_bf16)."""
    return _sample(model, prompt, seed, None, steps, guidance, shift, on_step=on_step, bf16=bf16)


def continue_clip(model: ClipModel, context_frames: np.ndarray, prompt: str, seed: int = 0, steps: int | None = None,
                  guidance: float | None = None, shift: float | None = None, steer: Steering | None = None,
                  on_step: Callable[[], None] | None = None, last: int | None = None,
                  context_noise: float | None = None, bf16: bool = False) -> np.ndarray:
    """Continue uint8 frames (X, H, W, 3) -> uint8 (F, H, W, 3): the last 1 + 4k of the given frames
    (``context_frames_used``) are encoded and held clean, the rest is generated; the whole clip is
    decoded, so its first 1 + 4k frames are the codec's reconstruction of the context. ``steer``:
    InstructNet's keys, instruction and video prompt (§3.4). ``last``: only the clip's last frames are
    decoded and returned (1 to F). ``context_noise``: the flow time the context is shown at (None: the
    model's sampler setting). ``bf16``: as ``generate``'s."""
    frames = np.asarray(context_frames)
    m = model.meta
    if frames.ndim != 4 or frames.shape[1:] != (m.height, m.width, 3) or frames.dtype != np.uint8:
        raise UserError(f"context frames {frames.shape} {frames.dtype}, the model makes {m.width}x{m.height} RGB",
                        f"pass uint8 frames of {m.width}x{m.height}")
    used = context_frames_used(model, len(frames))
    if last is not None and not 1 <= last <= m.frames:
        raise ValueError(f"last={last}: a clip has {m.frames} frames")
    with torch.inference_mode(), bf16_autocast(bf16):
        context = model.codec.encode_clip(frames[-used:]).float()  # (x, C, h, w), x = 1 + (used - 1) / 4
    return _sample(model, prompt, seed, context, steps, guidance, shift, steer, on_step, last, context_noise, bf16)
