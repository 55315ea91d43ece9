"""GameGen-X's video VAE (§3.3), as a causal temporal VAE on top of our 2D autoencoder's latents.

GameGen-X §3.3 encodes a clip with a 3D-VAE that compresses 8x in space and 4x in time, "SD's 2D VAE
extended with causal 3D CNN layers". Here the 8x in space stays with the project's 2D autoencoder
(models/autoencoder.py, FrameCodec), and ``TemporalVAE`` adds the 4x in time on its latents:
(B, F, C, h, w) 2D latents with F = 1 + 4k -> (B, 1 + k, C_v, h, w) video latents, spatial size unchanged.

Causal in time, as the causal video VAEs of CogVideoX and OpenSora are: the first frame is encoded
alone, so one image is a valid 1-frame clip, and latent frame j (j >= 1) sees frames <= 4j only, so
the context of a continuation (§3.3's frame mask) encodes without its future. Every temporal
convolution is padded on the past side only, and normalisation is per frame (GroupNorm over one
frame's channels and pixels), since a norm over the clip would leak the future into the past.

``ClipCodec`` composes the two and owns the folder (the only code that knows its file names;
safetensors and JSON only)::

    config.json, diffusion_pytorch_model.safetensors   the TemporalVAE (diffusers save_pretrained)
    ae/                                               the 2D autoencoder (FrameCodec.save)
    gamengen_video_vae.json                           format, version, meta
    README.md                                         the model card
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from diffusers import ConfigMixin, ModelMixin
from diffusers.configuration_utils import register_to_config
from torch import nn

from ..atomic import write_bytes_atomic, write_folder_atomic, write_json_atomic
from ..errors import UserError

if TYPE_CHECKING:
    from .autoencoder import FrameCodec

FORMAT, VERSION = "gamengen-video-vae", 1
META_FILE, AE_DIR, CARD = "gamengen_video_vae.json", "ae", "README.md"

# Widths only; the latent channels come from the 2D AE underneath (video channels = the same, so the
# DiT sees 4x fewer frames of the same kind, as OpenSora's temporal VAE over SD's 4 channels does).
VIDEO_VAE_PRESETS: dict[str, dict] = {
    # For tests, over the tiny AE's 4 channels: 90,756 parameters.
    "tiny": dict(block_out_channels=(8, 16, 16), layers_per_block=1, norm_num_groups=4),
    # Over cpu-16ch's 16 x 15 x 20 latents: 1,444,368 parameters (about 1 s a step of 8 clips of 17
    # frames on 2 CPU cores).
    "cpu": dict(block_out_channels=(32, 64, 64), layers_per_block=1, norm_num_groups=8),
}


class CausalConv3d(nn.Module):
    """(B, C, T, h, w) -> (B, C', T', h, w), kernel 3 in time and space. Time is padded with two copies
    of the first frame on the past side only (a still image's past), so output t sees inputs <= t.
    With ``stride`` 2, 1 + 2m frames -> 1 + m: output 0 sees frame 0 alone, output i frames <= 2i."""

    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv = nn.Conv3d(cin, cout, kernel_size=3, stride=(stride, 1, 1), padding=(0, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(torch.cat([x[:, :, :1], x[:, :, :1], x], dim=2))


class FrameNorm(nn.GroupNorm):
    """GroupNorm over each frame alone: (B, C, T, h, w) -> the same. Causal, unlike a clip-wide norm."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, t, h, w = x.shape
        y = super().forward(x.transpose(1, 2).reshape(b * t, c, h, w))
        return y.reshape(b, t, c, h, w).transpose(1, 2)


class ResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, groups: int):
        super().__init__()
        self.norm1, self.conv1 = FrameNorm(groups, cin), CausalConv3d(cin, cout)
        self.norm2, self.conv2 = FrameNorm(groups, cout), CausalConv3d(cout, cout)
        self.skip = nn.Conv3d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        return self.skip(x) + self.conv2(F.silu(self.norm2(h)))


class CausalUpsample(nn.Module):
    """1 + m frames -> 1 + 2m: frame 0 stays alone, each later frame is repeated twice, then a causal
    convolution tells the two copies apart by their pasts. Output t sees inputs <= ceil(t / 2)."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = CausalConv3d(channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x.repeat_interleave(2, dim=2)[:, :, 1:])


def _stages(channels: list[int], per_stage: int, groups: int, between) -> nn.Sequential:
    """``per_stage`` ResBlocks at each width, ``between(width)`` after every stage but the last, then
    the output norm and SiLU."""
    layers: list[nn.Module] = []
    prev = channels[0]
    for i, c in enumerate(channels):
        for _ in range(per_stage):
            layers.append(ResBlock(prev, c, groups))
            prev = c
        if i < len(channels) - 1:
            layers.append(between(c))
    return nn.Sequential(*layers, FrameNorm(groups, prev), nn.SiLU())


@dataclass
class Posterior:
    """A diagonal Gaussian over video latents: mean and logvar (B, L, C_v, h, w)."""

    mean: torch.Tensor
    logvar: torch.Tensor

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        noise = torch.randn(self.mean.shape, generator=generator).to(self.mean)  # a CPU generator: same draws anywhere
        return self.mean + torch.exp(0.5 * self.logvar) * noise

    def kl(self) -> torch.Tensor:
        """KL to N(0, I), averaged over every element (not summed), so its weight does not depend on sizes."""
        return 0.5 * (self.mean.square() + self.logvar.exp() - 1.0 - self.logvar).mean()


class TemporalVAE(ModelMixin, ConfigMixin):
    """2D latents (B, F, C, h, w), F = 1 + r*k -> Posterior over (B, 1 + k, C_v, h, w) -> back, with
    r = 2 ** (len(block_out_channels) - 1) (4 for the presets, GameGen-X §3.3's 4x in time).
    ``scaling_factor`` makes video latents unit-variance (measured after training, like SD's 0.18215);
    ``encode``/``decode`` work on unscaled latents, ClipCodec applies it."""

    @register_to_config
    def __init__(self, latent_channels: int = 4, video_channels: int = 4,
                 block_out_channels: tuple[int, ...] = (32, 64, 64), layers_per_block: int = 1,
                 norm_num_groups: int = 8, scaling_factor: float = 1.0):
        super().__init__()
        ch, g = list(block_out_channels), norm_num_groups
        self.enc_in = CausalConv3d(latent_channels, ch[0])
        # The temporal stride-2 downsamplings, between the stages: 1 + 4k frames -> 1 + k at two.
        self.encoder = _stages(ch, layers_per_block, g, lambda c: CausalConv3d(c, c, stride=2))
        self.enc_out = CausalConv3d(ch[-1], 2 * video_channels)  # mean and logvar
        self.dec_in = CausalConv3d(video_channels, ch[-1])
        self.decoder = _stages(ch[::-1], layers_per_block, g, CausalUpsample)
        self.dec_out = CausalConv3d(ch[0], latent_channels)

    @property
    def temporal_compression(self) -> int:
        return 2 ** (len(self.config.block_out_channels) - 1)

    def latent_frames(self, frames: int) -> int:
        """Clip length F -> latent frames 1 + (F - 1) / r; F must be 1 more than a multiple of r."""
        r = self.temporal_compression
        if frames < 1 or (frames - 1) % r:
            raise UserError(f"a clip of {frames} frames does not encode: the video VAE takes 1 + {r}k frames "
                            f"(the first alone, then groups of {r})", f"use 1, {1 + r}, {1 + 2 * r}, ... frames")
        return 1 + (frames - 1) // r

    def encode(self, z: torch.Tensor) -> Posterior:
        """z (B, F, C, h, w) 2D latents -> Posterior over (B, 1 + (F - 1) / r, C_v, h, w)."""
        if z.ndim != 5 or z.shape[2] != self.config.latent_channels:
            raise ValueError(f"expected (B, F, {self.config.latent_channels}, h, w) latents, got {tuple(z.shape)}")
        self.latent_frames(z.shape[1])
        h = self.enc_out(self.encoder(self.enc_in(z.transpose(1, 2)))).transpose(1, 2)  # (B, L, 2 C_v, h, w)
        mean, logvar = h.chunk(2, dim=2)
        return Posterior(mean, logvar.clamp(-30.0, 20.0))

    def decode(self, v: torch.Tensor) -> torch.Tensor:
        """v (B, L, C_v, h, w) -> 2D latents (B, 1 + r (L - 1), C, h, w)."""
        if v.ndim != 5 or v.shape[2] != self.config.video_channels:
            raise ValueError(f"expected (B, L, {self.config.video_channels}, h, w) latents, got {tuple(v.shape)}")
        return self.dec_out(self.decoder(self.dec_in(v.transpose(1, 2)))).transpose(1, 2)

    def forward(self, z: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, Posterior]:
        """z (B, F, C, h, w) -> (reconstruction (B, F, C, h, w) from a posterior sample, posterior)."""
        post = self.encode(z)
        return self.decode(post.sample(generator)), post


def build_temporal_vae(preset: str, latent_channels: int) -> TemporalVAE:
    if preset not in VIDEO_VAE_PRESETS:
        raise UserError(f"unknown video VAE preset '{preset}'", "use one of: " + ", ".join(VIDEO_VAE_PRESETS))
    return TemporalVAE(latent_channels=latent_channels, video_channels=latent_channels, **VIDEO_VAE_PRESETS[preset])


@dataclass
class ClipCodec:
    """uint8 clips (F, H, W, 3) <-> scaled video latents (1 + (F - 1) / 4, C_v, h, w): the 2D AE per
    frame, then the temporal VAE. Scaled latents are unit-variance, for the DiT's flow schedule."""

    frame: "FrameCodec"
    vae: TemporalVAE
    meta: dict = field(default_factory=dict)

    @property
    def scale(self) -> float:
        return float(self.vae.config.scaling_factor)

    device = property(lambda self: next(self.vae.parameters()).device)

    def latent_shape(self, frames: int) -> tuple[int, int, int, int]:
        """(L, C_v, h, w) of a clip of ``frames`` frames."""
        _, h, w = self.frame.latent_shape()
        return self.vae.latent_frames(frames), self.vae.config.video_channels, h, w

    @torch.no_grad()
    def encode_latents(self, z: torch.Tensor) -> torch.Tensor:
        """2D latents (B, F, C, h, w) -> scaled video latents (B, L, C_v, h, w), the posterior mean."""
        return self.vae.encode(z.to(self.device).float()).mean * self.scale

    @torch.no_grad()
    def decode_latents(self, v: torch.Tensor) -> torch.Tensor:
        """Scaled video latents (B, L, C_v, h, w) -> 2D latents (B, F, C, h, w)."""
        return self.vae.decode(v.to(self.device).float() / self.scale)

    def encode_clip(self, frames) -> torch.Tensor:
        """uint8 (F, H, W, 3) -> (L, C_v, h, w)."""
        self.vae.latent_frames(len(frames))  # refuse a bad length before paying for the 2D encoder
        return self.encode_latents(self.frame.encode(frames)[None])[0]

    def decode_clip(self, v: torch.Tensor, first: int = 0):
        """(L, C_v, h, w) -> uint8 numpy (1 + 4 (L - 1) - first, H, W, 3): the clip's frames from ``first``
        on. The temporal decoder needs every latent frame, but the 2D decoder works frame by frame, so
        the frames before ``first`` are never decoded (clip play drops its context's reconstruction)."""
        return self.frame.decode(self.decode_latents(v[None])[0, first:])

    def default_card(self) -> str:
        r = self.vae.temporal_compression
        return (f"# gamengen video VAE\n\nGameGen-X §3.3's video VAE as a causal {r}x temporal VAE over the 2D "
                f"autoencoder in `{AE_DIR}/`: clips of 1 + {r}k frames -> 1 + k latent frames of "
                f"{self.vae.config.video_channels} channels, scale {self.scale:.4g}. {json.dumps(self.meta)}\n")

    def save(self, folder: str | Path, card: str | None = None) -> None:
        """The whole folder, atomically: a crash leaves the old folder or the new one."""
        def write(tmp: Path) -> None:
            self.vae.save_pretrained(tmp, safe_serialization=True)
            self.frame.save(tmp / AE_DIR, card=f"The 2D autoencoder under the video VAE in {Path(folder).name}/.\n")
            write_json_atomic(tmp / META_FILE, {"format": FORMAT, "version": VERSION, "meta": self.meta})
            write_bytes_atomic(tmp / CARD, (card or self.default_card()).encode())

        write_folder_atomic(folder, write)

    @classmethod
    def load(cls, folder: str | Path, device: str | torch.device = "cpu") -> ClipCodec:
        from .autoencoder import AE_META, FrameCodec

        folder, fix = Path(folder), "pass the model/ folder that train_video_vae writes"
        if not folder.is_dir():
            raise UserError(f"no video VAE folder at {folder}", fix)
        if not (folder / META_FILE).is_file():
            what = "it holds a 2D autoencoder" if (folder / AE_META).is_file() else f"{META_FILE} is missing"
            raise UserError(f"{folder} is not a video VAE folder ({what})", fix)
        try:
            d = json.loads((folder / META_FILE).read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise UserError(f"{folder / META_FILE} is not valid JSON", "re-train the video VAE") from None
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise UserError(f"{folder} is not a video VAE folder ({META_FILE} is not {FORMAT})", fix)
        if d.get("version") != VERSION:
            raise UserError(f"{folder} is a video VAE of version {d.get('version')}, this gamengen reads {VERSION}",
                            "use the gamengen that made it, or re-train the video VAE")
        try:
            kind = json.loads((folder / "config.json").read_text()).get("_class_name")
            if kind != TemporalVAE.__name__:
                raise ValueError(f"config.json describes {kind}, not {TemporalVAE.__name__}")
            vae = TemporalVAE.from_pretrained(folder, use_safetensors=True)
        except (OSError, ValueError, RuntimeError, KeyError, AttributeError, json.JSONDecodeError) as e:
            raise UserError(f"the video VAE in {folder} is damaged ({type(e).__name__}: {str(e)[:100]})",
                            "re-train it with train_video_vae") from None
        frame = FrameCodec.load(folder / AE_DIR)
        frame.ae.to(device)
        return cls(frame, vae.to(device).eval(), dict(d.get("meta") or {}))
