"""InstructNet: GameGen-X's control branch beside the frozen MSDiT (§3.4).

GameGen-X §3.4: the foundation model stays frozen and InstructNet alone learns control, so control
never costs the base its generation. InstructNet's blocks are at the base's width, half spatial and
half temporal (the paper: 28 blocks beside a 28-layer base); its features are injected into the base's
latent. Three kinds of control reach it:

- keys (operation fusion expert): the keys pressed per frame -> MLP -> gamma, beta, an affine
  modulation of the normalised latent (§3.4's z^ = gamma(f_O) (z - mu) / sigma + beta(f_O));
- an instruction (instruction fusion expert): cross-attention to the instruction caption's T5
  features (the INS fields Env, Trans, Light, Act, Misc); with ``instruction_modulation`` (ours) also
  an affine modulation from the instruction's pooled features, as the keys' (see InstructNetLayer);
- a video prompt (Canny edges or motion vectors, curate/prompts.py), encoded by the video VAE and added to the latent
  at InstructNet's input; optional at inference.

How it is wired (ours; the paper gives no more): ControlNet's recipe as PixArt's DiT ControlNet
applies it. InstructNet's N layers start as copies of the base's first N layer pairs (N = half the
base's layers), read the base's embedded tokens, and the output of layer i goes through a
zero-initialised linear into the base's token stream after base layer i. The fusion experts' outputs
start at zero too, so a fresh InstructNet leaves the base's output exactly as it was, and training
starts from the base's behaviour. A control that is not given for a sample (no keys, no
instruction, no prompt) is switched off for it exactly, by a per-sample flag, not fed as zeros.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace

import torch
from diffusers import ConfigMixin, ModelMixin
from diffusers.configuration_utils import register_to_config
from diffusers.models.attention_processor import Attention
from diffusers.models.embeddings import PixArtAlphaTextProjection
from torch import nn

from .msdit import BaseState, MSDiT, MSDiTBlock, RopeAttnProcessor, patchify

@dataclass
class ControlInputs:
    """One batch's control signals; a sample without one of them has its flag False (and any values).

    keys (B, L, K) float: per latent frame, the share of its video frames' steps each key was held
    (``latent_keys``); instruction (B, Li, text_dim) with instruction_mask (B, Li) bool; prompt
    (B, L, C, h, w) video-prompt latents. has_keys, has_instruction, has_prompt (B,) bool.
    """

    keys: torch.Tensor
    has_keys: torch.Tensor
    instruction: torch.Tensor
    instruction_mask: torch.Tensor
    has_instruction: torch.Tensor
    prompt: torch.Tensor
    has_prompt: torch.Tensor

    def as_kwargs(self) -> dict[str, torch.Tensor]:
        """Per-sample tensors by name, for diffusion/flow.guided (which batches them for CFG)."""
        return dict(self.__dict__)

    def switched_off(self) -> "ControlInputs":
        """The same batch with every control off: InstructNet's no-control branch (CFG on the controls)."""
        return replace(self, has_keys=torch.zeros_like(self.has_keys),
                       has_instruction=torch.zeros_like(self.has_instruction), has_prompt=torch.zeros_like(self.has_prompt))


def latent_keys(held: torch.Tensor, compression: int) -> torch.Tensor:
    """Video-frame keys (B, F, K) -> latent-frame keys (B, L, K), L = 1 + (F - 1) / compression.

    The causal codec's latent frame 0 is video frame 0 alone; latent frame j >= 1 is video frames
    r(j-1)+1 .. rj, which the keys held after frames r(j-1) .. rj-1 led to (row k of a clip's keys
    leads from frame k to k + 1). Latent frame 0 has no keys inside the clip: zeros.
    """
    B, F, K = held.shape
    r = compression
    if (F - 1) % r:
        raise ValueError(f"{F} video frames do not group by {r}")
    steps = held[:, :F - 1].reshape(B, (F - 1) // r, r, K).mean(2)  # (B, L - 1, K)
    return torch.cat([torch.zeros(B, 1, K, dtype=held.dtype, device=held.device), steps], 1)


class InstructNetLayer(nn.Module):
    """One layer: the fusion experts, then a spatial and a temporal block (copies of the base's)."""

    def __init__(self, width: int, heads: int, qk_norm: str, instruction_modulation: bool = False):
        super().__init__()
        # Operation fusion expert (§3.4): gamma, beta from the key embedding, on the layer-normalised latent.
        self.key_norm = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.key_affine = nn.Sequential(nn.SiLU(), nn.Linear(width, 2 * width))
        # Instruction fusion expert (§3.4): cross-attention to the instruction caption.
        self.instruction_norm = nn.LayerNorm(width, eps=1e-6)
        self.instruction = Attention(width, cross_attention_dim=width, heads=heads, dim_head=width // heads,
                                     qk_norm=qk_norm, eps=1e-6, bias=True, processor=RopeAttnProcessor())
        # instruction_modulation (ours, beside §3.4's cross-attention): gamma, beta from the instruction's pooled
        # features on the same normalised latent as the keys'. An event's tint or light change is a shift of
        # the whole frame's colour, which an affine of every token says in one step, where cross-attention must
        # first learn to find the event's few words among the caption's ~35 tokens (docs/gamegen_x.md).
        self.instruction_affine = nn.Sequential(nn.SiLU(), nn.Linear(width, 2 * width)) if instruction_modulation else None
        self.spatial = MSDiTBlock(width, heads, "spatial", qk_norm)
        self.temporal = MSDiTBlock(width, heads, "temporal", qk_norm)
        self.out = nn.Linear(width, width)  # into the base's token stream; zero at first (ControlNet)
        zero = [self.key_affine[1], self.instruction.to_out[0], self.out]
        zero += [self.instruction_affine[1]] if self.instruction_affine is not None else []
        for m in zero:
            nn.init.zeros_(m.weight)
            nn.init.zeros_(m.bias)

    def forward(self, h: torch.Tensor, base: BaseState, key_emb: torch.Tensor, has_keys: torch.Tensor,
                instruction: torch.Tensor, instruction_mask: torch.Tensor, has_instruction: torch.Tensor,
                run_block, mod: torch.Tensor, instruction_emb: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """h (B, F, S, D); key_emb (B, F, D); instruction (B, Li, D); mod (B, F, 6, D) the blocks'
        modulation; instruction_emb (B, D) the pooled instruction (with instruction_modulation) -> (h,
        residual (B, F, S, D))."""
        B, T, S, D = h.shape
        gamma, beta = self.key_affine(key_emb).unsqueeze(2).chunk(2, dim=-1)  # (B, F, 1, D) each
        on = has_keys.to(h.dtype)[:, None, None, None]
        h = h + on * (gamma * self.key_norm(h) + beta)
        read = self.instruction(self.instruction_norm(h).reshape(B, T * S, D), instruction,
                                attention_mask=instruction_mask).view(B, T, S, D)
        said = has_instruction.to(h.dtype)[:, None, None, None]
        h = h + said * read
        if self.instruction_affine is not None:
            g, b = self.instruction_affine(instruction_emb)[:, None, None].chunk(2, dim=-1)  # (B, 1, 1, D) each
            h = h + said * (g * self.key_norm(h) + b)
        h = run_block(self.spatial, h, mod, base.text, base.text_mask, base.rope_spatial)
        h = run_block(self.temporal, h, mod, base.text, base.text_mask, base.rope_temporal)
        return h, self.out(h)


class InstructNet(ModelMixin, ConfigMixin):
    """The control branch of one MSDiT shape; ``control(inputs)`` gives MSDiT.forward's ``control``."""

    @register_to_config
    def __init__(self, hidden_size: int = 1152, num_layers: int = 14, num_heads: int = 16, latent_channels: int = 4,
                 patch_size: int = 2, text_dim: int = 4096, key_names: tuple[str, ...] = (), qk_norm: str = "rms_norm",
                 key_modulation: bool = False, instruction_modulation: bool = False):
        super().__init__()
        D, p = hidden_size, patch_size
        if not key_names:
            raise ValueError("InstructNet needs the names of the keys it reads")
        self.key_embed = nn.Sequential(nn.Linear(len(key_names), D), nn.SiLU(), nn.Linear(D, D))
        # key_modulation (ours, beside §3.4's affine): the key embedding also shifts the adaLN modulation of
        # InstructNet's own blocks, per latent frame, the way GameNGen and DIAMOND add the action to the
        # timestep conditioning, so every block can act on the keys. Zero at first.
        self.key_mod = nn.Sequential(nn.SiLU(), nn.Linear(D, 6 * D)) if key_modulation else None
        if self.key_mod is not None:
            nn.init.zeros_(self.key_mod[1].weight)
            nn.init.zeros_(self.key_mod[1].bias)
        self.instruction_proj = PixArtAlphaTextProjection(text_dim, D)
        # §3.4: the video prompt's latent is added at the input; zero at first, so a prompt starts as no-op.
        self.prompt_embed = nn.Conv2d(latent_channels, D, kernel_size=p, stride=p)
        nn.init.zeros_(self.prompt_embed.weight)
        nn.init.zeros_(self.prompt_embed.bias)
        self.layers = nn.ModuleList(InstructNetLayer(D, num_heads, qk_norm, instruction_modulation)
                                    for _ in range(num_layers))

    @classmethod
    def from_base(cls, base: MSDiT, key_names: list[str], num_layers: int | None = None,
                  key_modulation: bool = False, instruction_modulation: bool = False) -> "InstructNet":
        """An InstructNet for ``base``: its width, heads and latents, ``num_layers`` (default half the
        base's) layers whose blocks start as copies of the base's first ones (ControlNet's init)."""
        c = base.config
        n = num_layers or cls.default_layers(base)
        if not 1 <= n <= c.num_layers:
            raise ValueError(f"InstructNet layers must be 1..{c.num_layers}, got {n}")
        net = cls(hidden_size=c.hidden_size, num_layers=n, num_heads=c.num_heads, latent_channels=c.latent_channels,
                  patch_size=c.patch_size, text_dim=c.text_dim, key_names=tuple(key_names), qk_norm=c.qk_norm,
                  key_modulation=key_modulation, instruction_modulation=instruction_modulation)
        for layer, spatial, temporal in zip(net.layers, base.spatial_blocks, base.temporal_blocks):
            layer.spatial.load_state_dict(copy.deepcopy(spatial.state_dict()))
            layer.temporal.load_state_dict(copy.deepcopy(temporal.state_dict()))
        return net

    @staticmethod
    def default_layers(base: MSDiT) -> int:
        """Half the base's layers (the paper: 28 InstructNet blocks, half spatial and half temporal, beside 28
        base layers of two blocks each)."""
        return max(1, base.config.num_layers // 2)

    def fits(self, base: MSDiT) -> str | None:
        """What does not fit between this InstructNet and ``base``, or None."""
        mine, theirs = self.config, base.config
        for k in ("hidden_size", "num_heads", "latent_channels", "patch_size", "text_dim", "qk_norm"):
            if mine[k] != theirs[k]:
                return f"InstructNet's {k} is {mine[k]}, the clip model's MSDiT has {theirs[k]}"
        if mine.num_layers > theirs.num_layers:
            return f"InstructNet has {mine.num_layers} layers, the MSDiT only {theirs.num_layers}"
        return None

    def control(self, inputs: ControlInputs, run_block):
        """MSDiT.forward's ``control`` for these inputs: BaseState -> one residual per layer."""

        def residuals(base: BaseState) -> list[torch.Tensor]:
            dtype = base.tokens.dtype
            pe, _ = patchify(self.prompt_embed, inputs.prompt.to(dtype), self.config.patch_size)  # (B, F, S, D)
            x = base.tokens + inputs.has_prompt.to(dtype)[:, None, None, None] * pe
            key_emb = self.key_embed(inputs.keys.to(dtype))  # (B, F, D)
            mod = base.mod  # (B, F, 6, D)
            if self.key_mod is not None:
                on = inputs.has_keys.to(dtype)[:, None, None, None]
                mod = mod + on * self.key_mod(key_emb).unflatten(-1, (6, -1))
            instruction = self.instruction_proj(inputs.instruction.to(dtype))  # (B, Li, D)
            mask = inputs.instruction_mask | ~inputs.instruction_mask.any(-1, keepdim=True)  # never an all-masked row
            pooled = None
            if self.config.instruction_modulation:  # the mean of the instruction's tokens (B, D)
                w = mask.to(dtype).unsqueeze(-1)
                pooled = (instruction * w).sum(1) / w.sum(1)
            out = []
            for layer in self.layers:
                x, r = layer(x, base, key_emb, inputs.has_keys, instruction, mask, inputs.has_instruction, run_block,
                             mod, pooled)
                out.append(r)
            return out

        return residuals

    def expert_parameters(self) -> list[nn.Parameter]:
        """The fusion experts' and prompt embedding's parameters: what reads a control, as against the
        copied blocks and output projections."""
        mods = [self.key_embed, self.instruction_proj, self.prompt_embed]
        mods += [self.key_mod] if self.key_mod is not None else []
        mods += [m for layer in self.layers for m in (layer.key_affine, layer.instruction_norm, layer.instruction)]
        mods += [layer.instruction_affine for layer in self.layers if layer.instruction_affine is not None]
        return [p for m in mods for p in m.parameters()]


def controlled(base: MSDiT, instructnet: InstructNet):
    """A velocity model(x, t, **kwargs): the base MSDiT with InstructNet's residuals. kwargs are the
    MSDiT's (text, metadata) and ControlInputs.as_kwargs()'s, all per-sample, so diffusion/flow.guided
    can batch them for CFG."""
    names = set(ControlInputs.__dataclass_fields__)

    def model(x: torch.Tensor, t: torch.Tensor, **kwargs) -> torch.Tensor:
        inputs = ControlInputs(**{k: kwargs.pop(k) for k in names})
        return base(x, t, **kwargs, control=instructnet.control(inputs, base.run_block))

    return model
