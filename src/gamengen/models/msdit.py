"""MSDiT: GameGen-X's masked spatial-temporal diffusion transformer, the foundation model (§3.3).

GameGen-X §3.3 and Appendix: the 3D-VAE latent is cut into 2x2 patches; 28 layers, each a spatial
block (attention among the tokens of one frame) then a temporal block (attention among the frames
at one spatial position), with T5 text by cross-attention; width 1152, 16 heads, QK-norm and RoPE;
metadata (aspect ratio, frame count, timestep, fps) go through MLPs and are added to the
conditioning. The network predicts the rectified-flow velocity (diffusion/flow.py). The frame mask
of §3.3 reaches it only through the per-frame timestep: clean context frames come with t = 0.

Text dropout for classifier-free guidance (§3.5, 25%) is the caller's: it passes ``null_text`` (a
learned embedding) for the dropped captions, or equivalently any text with an all-False mask.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from diffusers import ConfigMixin, ModelMixin
from diffusers.configuration_utils import register_to_config
from diffusers.models.attention import FeedForward
from diffusers.models.attention_processor import Attention
from diffusers.models.embeddings import (PixArtAlphaTextProjection, TimestepEmbedding, Timesteps,
                                         apply_rotary_emb, get_1d_rotary_pos_embed)
from torch import nn

Rope = tuple[torch.Tensor, torch.Tensor]  # (cos, sin), each (N, head_dim) for N positions


@dataclass
class BaseState:
    """What a control branch reads from one MSDiT pass, before the first layer."""

    tokens: torch.Tensor  # (B, F, S, D) the patch-embedded latents
    cond: torch.Tensor  # (B, F, D) timestep, metadata (and pooled caption) conditioning
    mod: torch.Tensor  # (B, F, 6, D) the shared adaLN-single modulation
    text: torch.Tensor  # (B, L, D) the projected caption
    text_mask: torch.Tensor | None  # (B, L) bool
    rope_spatial: Rope
    rope_temporal: Rope


Control = Callable[[BaseState], list[torch.Tensor]]

MSDIT_PRESETS: dict[str, dict] = {
    # For tests: 90,176 parameters.
    "tiny": dict(latent_channels=4, text_dim=16, hidden_size=32, num_layers=2, num_heads=2, frequency_dim=32),
    # Sized for a 2-core CPU on our 2D AE's 16 x 15 x 20 latents, 5 latent frames (8 x 10 = 80 tokens
    # per frame after padding to 16 x 20): 7,967,744 parameters.
    "cpu": dict(latent_channels=16, text_dim=256, hidden_size=192, num_layers=6, num_heads=6),
    # GameGen-X Appendix: 28 layers, 1152 channels, 16 heads, patch 2, T5-XXL text (4096 wide). The
    # 3D-VAE is SD's 2D VAE extended in time, so 4 latent channels (assumed; the paper gives no
    # number). 1,215,293,840 parameters (cf. OpenSora 1.2's STDiT3-XL/2, ~1.1B, same shape).
    "paper": dict(latent_channels=4, text_dim=4096, hidden_size=1152, num_layers=28, num_heads=16),
}


def patchify(embed: nn.Conv2d, x: torch.Tensor, p: int) -> tuple[torch.Tensor, tuple[int, int]]:
    """x (B, F, C, h, w) -> tokens (B, F, S, D) by the p x p patch convolution ``embed``, and the patch
    grid (hp, wp). Sides that are not a multiple of the patch (15 x 20 from our 2D AE) are zero-padded
    at the bottom/right."""
    B, T, C, h, w = x.shape
    tokens = embed(F.pad(x.reshape(B * T, C, h, w), (0, -w % p, 0, -h % p)))  # (B*F, D, hp, wp)
    hp, wp = tokens.shape[-2:]
    return tokens.flatten(2).transpose(1, 2).reshape(B, T, hp * wp, -1), (hp, wp)


class RopeAttnProcessor:
    """Attention with QK-norm and optional RoPE on q and k, by F.scaled_dot_product_attention.

    diffusers' stock processor has no hook for RoPE; this one keeps diffusers' Attention for the
    weights (to_q/k/v, norm_q/k, to_out) and rotates q and k between the QK-norm and the product.
    """

    def __call__(self, attn: Attention, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None, rope: Rope | None = None) -> torch.Tensor:
        """hidden_states (N, S, D); encoder_hidden_states (N, L, D), None for self-attention;
        attention_mask (N, L) bool, True = attend; rope for the S positions -> (N, S, D)."""
        context = hidden_states if encoder_hidden_states is None else encoder_hidden_states
        q, k, v = (proj(s).unflatten(-1, (attn.heads, -1)).transpose(1, 2)  # (N, heads, S or L, head_dim)
                   for proj, s in ((attn.to_q, hidden_states), (attn.to_k, context), (attn.to_v, context)))
        q, k = attn.norm_q(q), attn.norm_k(k)  # QK-norm (Appendix): keeps logits bounded at width 1152
        if rope is not None:
            q, k = apply_rotary_emb(q, rope), apply_rotary_emb(k, rope)
        if attention_mask is not None:
            attention_mask = attention_mask[:, None, None, :]  # same for every head and query
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask)
        return attn.to_out[0](out.transpose(1, 2).flatten(2))


class MSDiTBlock(nn.Module):
    """One spatial or temporal block: self-attention, text cross-attention, MLP, each pre-norm.

    Self-attention and MLP are modulated per frame (shift, scale, gate) the adaLN-single way
    (PixArt-alpha): the model computes one modulation per frame, each block adds its own learned
    offsets. Gates and the cross-attention output start at zero, so a fresh block is the identity
    (DiT's adaLN-Zero), without DiT's per-block modulation MLP (0.4B extra at paper size).
    """

    def __init__(self, width: int, heads: int, axis: str, qk_norm: str):
        super().__init__()
        self.axis = axis  # "spatial": over the S tokens of a frame; "temporal": over the F frames at a position
        kw = dict(heads=heads, dim_head=width // heads, qk_norm=qk_norm, eps=1e-6, bias=True)
        self.norm1 = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(width, processor=RopeAttnProcessor(), **kw)
        self.norm2 = nn.LayerNorm(width, eps=1e-6)
        self.cross = Attention(width, cross_attention_dim=width, processor=RopeAttnProcessor(), **kw)
        self.norm3 = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.mlp = FeedForward(width, mult=4, activation_fn="gelu-approximate")
        self.modulation = nn.Parameter(torch.zeros(6, width))  # this block's offsets to the shared modulation

    def forward(self, x: torch.Tensor, mod: torch.Tensor, text: torch.Tensor, text_mask: torch.Tensor | None,
                rope: Rope) -> torch.Tensor:
        """x (B, F, S, D), mod (B, F, 6, D), text (B, L, D), text_mask (B, L) bool or None,
        rope for S (spatial) or F (temporal) positions -> (B, F, S, D)."""
        B, T, S, D = x.shape
        shift1, scale1, gate1, shift2, scale2, gate2 = (mod + self.modulation).unsqueeze(2).unbind(3)  # (B, F, 1, D)
        h = self.norm1(x) * (1 + scale1) + shift1
        if self.axis == "spatial":
            h = self.attn(h.reshape(B * T, S, D), rope=rope).view(B, T, S, D)
        else:
            h = self.attn(h.transpose(1, 2).reshape(B * S, T, D), rope=rope).view(B, S, T, D).transpose(1, 2)
        x = x + gate1 * h
        # Each token reads the text on its own, so all F * S tokens of a sample share one call.
        x = x + self.cross(self.norm2(x).reshape(B, T * S, D), text, attention_mask=text_mask).view(B, T, S, D)
        return x + gate2 * self.mlp(self.norm3(x) * (1 + scale2) + shift2)


class MSDiT(ModelMixin, ConfigMixin):
    """x (B, F, C, h, w) latents, t (B, F), text and metadata -> velocity (B, F, C, h, w)."""

    _supports_gradient_checkpointing = True

    @register_to_config
    def __init__(self, latent_channels: int = 4, patch_size: int = 2, hidden_size: int = 1152, num_layers: int = 28,
                 num_heads: int = 16, text_dim: int = 4096, frequency_dim: int = 256, qk_norm: str = "rms_norm",
                 rope_theta: float = 10000.0, pooled_text: bool = False):
        super().__init__()
        D, p = hidden_size, patch_size
        if D % num_heads or (D // num_heads) % 4:
            raise ValueError(f"head width {D}/{num_heads} must be a multiple of 4 (2D RoPE splits it between h and w)")
        self.gradient_checkpointing = False
        self.patch_embed = nn.Conv2d(latent_channels, D, kernel_size=p, stride=p)  # the Appendix's extra 2x down
        self.text_proj = PixArtAlphaTextProjection(text_dim, D)  # once, so cross-attention k/v are D -> D
        # A dropped caption (CFG) is this learned vector at every position; see null_text.
        self.null_text_embedding = nn.Parameter(torch.randn(text_dim) * text_dim**-0.5)
        self.sinusoid = Timesteps(frequency_dim, flip_sin_to_cos=True, downscale_freq_shift=0)
        self.embed = nn.ModuleDict({name: TimestepEmbedding(frequency_dim, D) for name in
                                    ("timestep", "fps", "num_frames", "aspect_ratio", "resolution")})
        # Not in the paper: the caption's mean feature added to the conditioning, as Imagen and SD3 add a
        # pooled text embedding to the timestep's. It gives the text a path to every block's modulation
        # (the whole clip's look) besides cross-attention, which starts at zero (docs/gamegen_x.md).
        self.text_pool = PixArtAlphaTextProjection(text_dim, D) if pooled_text else None
        self.modulation = nn.Sequential(nn.SiLU(), nn.Linear(D, 6 * D))  # adaLN-single: shared by all blocks
        self.spatial_blocks = nn.ModuleList(MSDiTBlock(D, num_heads, "spatial", qk_norm) for _ in range(num_layers))
        self.temporal_blocks = nn.ModuleList(MSDiTBlock(D, num_heads, "temporal", qk_norm) for _ in range(num_layers))
        self.norm_out = nn.LayerNorm(D, elementwise_affine=False, eps=1e-6)
        self.out_modulation = nn.Sequential(nn.SiLU(), nn.Linear(D, 2 * D))
        self.proj_out = nn.Linear(D, p * p * latent_channels)
        self._init_weights()

    def _init_weights(self) -> None:
        # DiT's recipe: Xavier linears and patch conv, zero biases, N(0, 0.02) conditioning MLPs, and zero
        # for everything that writes to the token stream at first, so a fresh model outputs v = 0.
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
        nn.init.xavier_uniform_(self.patch_embed.weight.view(self.patch_embed.out_channels, -1))
        nn.init.zeros_(self.patch_embed.bias)
        for emb in self.embed.values():
            nn.init.normal_(emb.linear_1.weight, std=0.02)
            nn.init.normal_(emb.linear_2.weight, std=0.02)
        zero = [self.modulation[1], self.out_modulation[1], self.proj_out]
        zero += [b.cross.to_out[0] for b in (*self.spatial_blocks, *self.temporal_blocks)]
        for m in zero:
            nn.init.zeros_(m.weight)
            nn.init.zeros_(m.bias)

    def null_text(self, batch: int, length: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        """The dropped caption for CFG: (B, L, text_dim) copies of null_text_embedding and an all-True
        mask (B, L). Same output as any text whose mask is all False (see forward)."""
        emb = self.null_text_embedding.expand(batch, length, -1)
        return emb, torch.ones(batch, length, dtype=torch.bool, device=emb.device)

    def condition(self, t: torch.Tensor, fps: torch.Tensor, num_frames: torch.Tensor, height: torch.Tensor,
                  width: torch.Tensor) -> torch.Tensor:
        """Per-frame conditioning (B, F, D): the frame's timestep plus the clip's metadata, each a sinusoid
        and an MLP, summed (Appendix). t (B, F) in [0, 1]; fps, num_frames (video frames), height, width
        (pixels) (B,). t and the aspect ratio are scaled by 1000 so that the sinusoid's channels (periods
        2pi to 2pi * 1e4) resolve them, as SD3 does for t; the others are used in their own units."""
        dtype = self.patch_embed.weight.dtype

        def emb(name: str, value: torch.Tensor) -> torch.Tensor:  # value (N,) -> (N, D)
            return self.embed[name](self.sinusoid(value.float()).to(dtype))

        B, T = t.shape
        height, width = height.float(), width.float()
        meta = (emb("fps", fps) + emb("num_frames", num_frames) + emb("aspect_ratio", height / width * 1000)
                + emb("resolution", (height * width).sqrt()))  # (B, D)
        return emb("timestep", t.reshape(-1) * 1000).view(B, T, -1) + meta[:, None]

    def _rope(self, positions: list[torch.Tensor]) -> Rope:
        """RoPE for N tokens from their coordinates (one (N,) float tensor per axis): the head's channels are
        split evenly between the axes, a 1D rotation per axis (2D in space, 1D in time)."""
        head = self.config.hidden_size // self.config.num_heads
        parts = [get_1d_rotary_pos_embed(head // len(positions), pos, self.config.rope_theta, use_real=True)
                 for pos in positions]
        return torch.cat([c for c, _ in parts], -1), torch.cat([s for _, s in parts], -1)

    def run_block(self, block: "MSDiTBlock", tokens: torch.Tensor, mod: torch.Tensor, text: torch.Tensor,
                  mask: torch.Tensor | None, rope: Rope) -> torch.Tensor:
        """One block, gradient-checkpointed when that is on and gradients are wanted."""
        if torch.is_grad_enabled() and self.gradient_checkpointing:
            return self._gradient_checkpointing_func(block, tokens, mod, text, mask, rope)
        return block(tokens, mod, text, mask, rope)

    def forward(self, x: torch.Tensor, t: torch.Tensor, encoder_hidden_states: torch.Tensor,
                encoder_attention_mask: torch.Tensor | None = None, *, fps: torch.Tensor, num_frames: torch.Tensor,
                height: torch.Tensor, width: torch.Tensor, control: Control | None = None) -> torch.Tensor:
        """x (B, F, C, h, w) latents; t (B, F) in [0, 1], 0 on clean context frames; encoder_hidden_states
        (B, L, text_dim); encoder_attention_mask (B, L) bool, True = real token (None: all real); fps,
        num_frames, height, width (B,) -> velocity (B, F, C, h, w).

        ``control`` (GameGen-X §3.4's InstructNet, models/instructnet.py) is called once with this pass's
        BaseState and returns residuals (B, F, S, D), the i-th added to the tokens after layer i."""
        B, T, C, h, w = x.shape
        p = self.config.patch_size
        # Sides that are not a multiple of the patch (15 x 20 from our 2D AE) are zero-padded at the
        # bottom/right, and the output cropped back.
        tokens, (hp, wp) = patchify(self.patch_embed, x, p)  # (B, F, S, D)

        text, mask = encoder_hidden_states, encoder_attention_mask
        if mask is not None:
            # A caption with no real token is the null caption, so CFG dropout can be done by the mask
            # alone, and attention never meets an all-masked row (which would give NaN).
            empty = ~mask.any(-1)
            text = torch.where(empty[:, None, None], self.null_text_embedding.to(text.dtype), text)
            mask = mask | empty[:, None]
        c = self.condition(t, fps, num_frames, height, width)  # (B, F, D)
        if self.text_pool is not None:
            keep = (mask if mask is not None else torch.ones(text.shape[:2], dtype=torch.bool, device=text.device))
            keep = keep[..., None].to(text.dtype)  # (B, L, 1)
            c = c + self.text_pool((text * keep).sum(1) / keep.sum(1))[:, None]  # mean over real tokens (B, 1, D)
        text = self.text_proj(text)  # (B, L, D)

        mod = self.modulation(c).unflatten(-1, (6, -1))  # (B, F, 6, D)
        grid = dict(device=x.device, dtype=torch.float32)
        rope_s = self._rope([torch.arange(hp, **grid).repeat_interleave(wp), torch.arange(wp, **grid).repeat(hp)])
        rope_t = self._rope([torch.arange(T, **grid)])
        residuals = control(BaseState(tokens, c, mod, text, mask, rope_s, rope_t)) if control is not None else []
        for i, (spatial, temporal) in enumerate(zip(self.spatial_blocks, self.temporal_blocks)):
            for block, rope in ((spatial, rope_s), (temporal, rope_t)):
                tokens = self.run_block(block, tokens, mod, text, mask, rope)
            if i < len(residuals):
                tokens = tokens + residuals[i]

        shift, scale = self.out_modulation(c).unsqueeze(2).chunk(2, dim=-1)  # (B, F, 1, D) each
        out = self.proj_out(self.norm_out(tokens) * (1 + scale) + shift)  # (B, F, S, p*p*C)
        out = out.view(B, T, hp, wp, p, p, C).permute(0, 1, 6, 2, 4, 3, 5).reshape(B, T, C, hp * p, wp * p)
        return out[..., :h, :w]
