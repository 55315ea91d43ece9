"""The latent autoencoder (paper §3.2.2, docs/world_model.md): frames <-> latents.

At CPU scale it is a small `diffusers` AutoencoderKL trained from scratch on the store; at paper
scale, SD-v1.4's VAE from a local diffusers folder. Either way `FrameCodec` hides the padding (the
paper pads 320x240 to 320x256) and the latent scaling, so the rest of the code sees uint8 frames on
one side and unit-variance latents on the other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..errors import UserError

AE_META = "gamengen_ae.json"
AE_CLASSES = ("AutoencoderKL", "AsymmetricAutoencoderKL")  # diffusers classes a folder may hold  # beside diffusers' config.json: frame size, padding, latent scale


@dataclass
class AEConfig:
    """A small AutoencoderKL: 8x8 pixels -> `latent_channels` numbers, like SD's VAE but far cheaper.

    Play pays the decode every frame (docs/performance.md), and at 160x120 the full-resolution stages dominate
    it, so they are narrow (8 and 16 channels). Eight latent channels instead of SD's four carry the
    detail those narrow stages cannot invent (the HUD digits); the U-Net's only extra cost is a wider
    first convolution. Measured in docs/performance.md."""

    block_out_channels: tuple[int, ...] = (8, 16, 32, 64)
    layers_per_block: int = 1
    latent_channels: int = 8
    norm_num_groups: int = 4
    kl_weight: float = 1e-6  # a whisper of KL keeps latents bounded; reconstructions are what matter
    pretrained: str | None = None  # a local diffusers VAE folder (paper preset: SD-v1.4's vae/)
    # Frames are padded to a multiple of this (the AE's downsampling times the U-Net's), so the
    # latents halve as often as the U-Net needs (paper: 240 -> 256).
    pad_multiple: int = 16
    # Wider encoder stages than the decoder's (None: the same). The encoder never runs during play
    # (autoregression stays in latent space), so only the decoder is on the frame budget (issue 17);
    # built as diffusers' AsymmetricAutoencoderKL, whose decoder skips its inpainting branch here.
    encoder_channels: tuple[int, ...] | None = None

    @property
    def downsample(self) -> int:
        return 2 ** (len(self.block_out_channels) - 1)


AE_PRESETS = {
    "tiny": AEConfig(block_out_channels=(8, 16), layers_per_block=1, latent_channels=4, norm_num_groups=4,
                     pad_multiple=4),
    "cpu": AEConfig(),
    # The same decoder cost with twice the latent channels (issue 17's latent-channel lever); padded
    # for U-Nets that halve the latents twice.
    "cpu-16ch": AEConfig(latent_channels=16, pad_multiple=32),
    # Issue 17's downsampling lever: 4x instead of 8x at the same 12x compression as cpu-16ch
    # (40x30 latents of 4 channels), so space and channels can be compared at equal numbers.
    "cpu-4x": AEConfig(block_out_channels=(16, 32, 64), latent_channels=4),
    # Issue 17's capacity lever: every stage twice as wide (about 4x the decode cost).
    "cpu-wide": AEConfig(block_out_channels=(16, 32, 64, 128), latent_channels=8),
    # Issue 17's asymmetric lever: cpu-16ch's decoder behind a 4x wider encoder (diffusers' class adds
    # one attention layer over the 16x20 latents to the decoder, a small part of its cost).
    "cpu-asym": AEConfig(latent_channels=16, pad_multiple=32, encoder_channels=(32, 64, 128, 256)),
    # SD-v1's VAE architecture; pass --pretrained <sd-v1-4>/vae to start from its weights (§3.2.2)
    "paper": AEConfig(block_out_channels=(128, 256, 512, 512), layers_per_block=2, norm_num_groups=32,
                      pad_multiple=64),
}


def build_autoencoder(cfg: AEConfig) -> nn.Module:
    from diffusers import AsymmetricAutoencoderKL, AutoencoderKL

    if cfg.pretrained:
        try:
            return AutoencoderKL.from_pretrained(cfg.pretrained)
        except (OSError, ValueError) as e:
            raise UserError(f"cannot load a diffusers VAE from {cfg.pretrained} ({str(e)[:100]})",
                            "point at a local folder with config.json + diffusion_pytorch_model.safetensors") from None
    n = len(cfg.block_out_channels)
    if cfg.encoder_channels:
        if len(cfg.encoder_channels) != n:
            raise UserError("an asymmetric AE needs as many encoder as decoder stages", "fix its preset")
        return AsymmetricAutoencoderKL(
            in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * n,
            down_block_out_channels=cfg.encoder_channels, layers_per_down_block=cfg.layers_per_block,
            up_block_types=("UpDecoderBlock2D",) * n, up_block_out_channels=cfg.block_out_channels,
            layers_per_up_block=cfg.layers_per_block, latent_channels=cfg.latent_channels,
            norm_num_groups=cfg.norm_num_groups)
    return AutoencoderKL(
        in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * n,
        up_block_types=("UpDecoderBlock2D",) * n, block_out_channels=cfg.block_out_channels,
        layers_per_block=cfg.layers_per_block, latent_channels=cfg.latent_channels,
        norm_num_groups=cfg.norm_num_groups, mid_block_add_attention=False)


def padded_size(height: int, width: int, multiple: int) -> tuple[int, int]:
    """Pad up to a multiple of the U-Net's total downsampling (paper: 240 -> 256)."""
    return -(-height // multiple) * multiple, -(-width // multiple) * multiple


@dataclass
class FrameCodec:
    """uint8 frames (B, H, W, 3) <-> scaled latents (B, C, h, w). ``scale`` makes latents unit-variance
    (measured on training frames, as SD's 0.18215 was), so the diffusion schedule fits them."""

    ae: nn.Module
    height: int
    width: int
    pad_multiple: int = 32  # AE x8, then the U-Net's two downsamplings x4
    scale: float = 1.0
    meta: dict = field(default_factory=dict)

    @property
    def padded(self) -> tuple[int, int]:
        return padded_size(self.height, self.width, self.pad_multiple)

    def to_pixels(self, frames: torch.Tensor | np.ndarray) -> torch.Tensor:
        """uint8 (B, H, W, 3) -> float (B, 3, H', W') in [-1, 1], zero-padded at the bottom/right."""
        x = torch.as_tensor(np.asarray(frames)).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)
        ph, pw = self.padded
        return nn.functional.pad(x, (0, pw - self.width, 0, ph - self.height), value=-1.0)

    def to_frames(self, x: torch.Tensor) -> np.ndarray:
        """float (B, 3, H', W') in [-1, 1] -> uint8 (B, H, W, 3), padding cropped."""
        x = x[:, :, : self.height, : self.width].float().clamp(-1, 1).add(1).mul(127.5).round()
        return x.to(torch.uint8).permute(0, 2, 3, 1).contiguous().cpu().numpy()

    def latent_shape(self) -> tuple[int, int, int]:
        """(C, h, w) of one frame's latent."""
        c = self.ae.config
        d = 2 ** (len(c.block_out_channels) - 1)
        ph, pw = self.padded
        return c.latent_channels, ph // d, pw // d

    @torch.no_grad()
    def encode(self, frames) -> torch.Tensor:
        device = next(self.ae.parameters()).device
        return self.ae.encode(self.to_pixels(frames).to(device)).latent_dist.mode() * self.scale

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> np.ndarray:
        return self.to_frames(self.decode_pixels(latents))

    def decode_pixels(self, latents: torch.Tensor) -> torch.Tensor:
        """Scaled latents (B, C, h, w) -> pixels (B, 3, H', W') in [-1, 1], padding included (the
        play graph exports this; ``decode`` crops and quantises it)."""
        device = next(self.ae.parameters()).device
        return self.ae.decode(latents.to(device) / self.scale).sample

    def save(self, out: Path, card: str) -> None:
        """diffusers save_pretrained (safetensors + config.json), our meta, a model card."""
        from ..atomic import write_bytes_atomic, write_json_atomic

        self.ae.save_pretrained(out, safe_serialization=True)
        write_json_atomic(out / AE_META, {"height": self.height, "width": self.width,
                                          "pad_multiple": self.pad_multiple, "scale": self.scale, **self.meta})
        write_bytes_atomic(out / "README.md", card.encode())

    @classmethod
    def load(cls, folder: str | Path) -> "FrameCodec":
        import diffusers

        folder = Path(folder)
        if not (folder / AE_META).exists():
            raise UserError(f"no autoencoder in {folder} ({AE_META} missing)",
                            "train one with `gamengen train-ae --data STORE --out DIR`, then pass --ae DIR")
        try:
            meta = json.loads((folder / AE_META).read_text())
            kind = json.loads((folder / "config.json").read_text()).get("_class_name")
            if kind not in AE_CLASSES:
                raise ValueError(f"{kind} is not one of the autoencoders gamengen reads ({', '.join(AE_CLASSES)})")
            quiet = diffusers.utils.logging.get_verbosity()
            diffusers.utils.logging.set_verbosity_error()  # the asymmetric class warns about its own saved keys
            try:
                ae = getattr(diffusers, kind).from_pretrained(folder, use_safetensors=True).eval()
            finally:
                diffusers.utils.logging.set_verbosity(quiet)
            return cls(ae, int(meta.pop("height")), int(meta.pop("width")), int(meta.pop("pad_multiple")),
                       float(meta.pop("scale")), meta)
        except (OSError, ValueError, KeyError, json.JSONDecodeError) as e:
            raise UserError(f"autoencoder in {folder} does not load ({str(e)[:120]})",
                            "re-train it with `gamengen train-ae`") from None

    def encoder_weights(self) -> dict[str, torch.Tensor]:
        """The weights that make the latents (encoder and quant_conv), by name; the decoder's are not."""
        return {k: v for k, v in self.ae.state_dict().items() if k.startswith(("encoder.", "quant_conv."))}

    def encoder_id(self) -> str:
        """A digest of the encoder weights alone: the latent cache's key (a decoder fine-tune,
        which never changes latents, keeps the cache valid)."""
        import hashlib

        h = hashlib.sha256()
        for k, v in sorted(self.encoder_weights().items()):
            h.update(k.encode())
            h.update(v.detach().cpu().float().numpy().tobytes())
        h.update(repr(self.scale).encode())
        return h.hexdigest()[:16]
