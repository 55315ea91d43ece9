"""A patch discriminator: the adversary of `clip tune-codec --adversarial` (train/codec_tune.py).

A decoder trained on pixel MSE alone paints the mean of what its latent leaves open, so fine texture
(wall patterns, a monster's outline) comes out as a smooth average. The autoencoders of latent
diffusion, SD's VAE among them, the one GameGen-X's 3D-VAE extends (§3.3), therefore train with a
patch-based adversarial loss beside the reconstruction loss (LDM, Rombach et al. 2022, §3; from
VQGAN, Esser et al. 2021, §3.1): a small convolutional net scores every patch of a frame as real or
decoded, and the decoder learns to make patches it cannot tell apart. This is VQGAN's PatchGAN cut
down for 160x120 frames on a CPU: three stride-2 convolutions (a receptive field of about 46 pixels),
GroupNorm instead of BatchNorm (a step's batch is a few clips), and one logit per patch.
"""

from __future__ import annotations

import torch
from torch import nn


class PatchDiscriminator(nn.Module):
    """Frames (B, 3, H, W) in [-1, 1] -> logits (B, 1, H/8, W/8): > 0 says "real" for that patch."""

    def __init__(self, channels: int = 32, layers: int = 3):
        super().__init__()
        blocks: list[nn.Module] = [nn.Conv2d(3, channels, 4, 2, 1), nn.LeakyReLU(0.2)]
        width = channels
        for _ in range(layers - 1):
            blocks += [nn.Conv2d(width, 2 * width, 4, 2, 1), nn.GroupNorm(8, 2 * width), nn.LeakyReLU(0.2)]
            width *= 2
        blocks.append(nn.Conv2d(width, 1, 3, 1, 1))
        self.net = nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def hinge_d_loss(real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
    """The discriminator's hinge loss on its logits for real and decoded patches (VQGAN's choice)."""
    return 0.5 * (torch.relu(1.0 - real).mean() + torch.relu(1.0 + fake).mean())
