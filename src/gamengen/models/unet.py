"""The pure network: a diffusers UNet2DConditionModel conditioned on past latents and actions.

Paper §3.2: past frames' latents are concatenated with the noisy target on channels, so
``in_channels = C * (N + 1)``; each past action becomes one token, and the tokens replace the text
in cross-attention. The context noise level (§3.2.1) enters as a bucket embedding added to the
timestep embedding, which is exactly what UNet2DConditionModel's class embedding does; by default
the last action shares that embedding (one entry per (bucket, action) pair).
"""

from __future__ import annotations

import torch
from diffusers import ConfigMixin, ModelMixin, UNet2DConditionModel
from diffusers.configuration_utils import register_to_config
from torch import nn


class ActionConditionedUNet(ModelMixin, ConfigMixin):
    @register_to_config
    def __init__(
        self,
        latent_channels: int = 4,
        latent_height: int = 16,
        latent_width: int = 20,
        context: int = 64,  # N past frames and actions (paper: 64)
        n_actions: int = 12,
        block_out_channels: tuple[int, ...] = (64, 128, 128),
        layers_per_block: int = 1,
        cross_attention_dim: int = 128,
        attention_head_dim: int = 4,
        down_block_types: tuple[str, ...] = ("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types: tuple[str, ...] = ("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
        noise_buckets: int = 10,  # paper §4.2: 10 buckets of context noise level
        norm_num_groups: int = 32,
        last_action_embedding: bool = True,
    ):
        super().__init__()
        self.unet = UNet2DConditionModel(
            sample_size=(latent_height, latent_width), in_channels=latent_channels * (context + 1),
            out_channels=latent_channels, down_block_types=tuple(down_block_types),
            up_block_types=tuple(up_block_types), block_out_channels=tuple(block_out_channels),
            layers_per_block=layers_per_block, cross_attention_dim=cross_attention_dim,
            attention_head_dim=attention_head_dim, norm_num_groups=norm_num_groups,
            num_class_embeds=noise_buckets * (n_actions + 1 if last_action_embedding else 1))
        # One token per action; index n_actions is "no action" (context before the episode start).
        self.action_embedding = nn.Embedding(n_actions + 1, cross_attention_dim)
        # Cross-attention ignores token order, but the last action decides the next frame most:
        # a learned position per context step tells the tokens apart.
        self.action_position = nn.Parameter(torch.zeros(context, cross_attention_dim))
        nn.init.normal_(self.action_position, std=0.02)

    def forward(self, noisy: torch.Tensor, timesteps: torch.Tensor, context: torch.Tensor, actions: torch.Tensor,
                noise_bucket: torch.Tensor) -> torch.Tensor:
        """noisy (B, C, h, w), timesteps (B,), context (B, N, C, h, w), actions (B, N) int,
        noise_bucket (B,) int -> v_pred (B, C, h, w)."""
        B, N, C, h, w = context.shape
        x = torch.cat([noisy, context.reshape(B, N * C, h, w)], dim=1)  # (B, C*(N+1), h, w)
        return self.unet(x, timesteps, encoder_hidden_states=self.tokens(actions),
                         class_labels=self.class_label(actions, noise_bucket)).sample

    def tokens(self, actions: torch.Tensor) -> torch.Tensor:
        """actions (B, N) -> the cross-attention sequence (B, N, D)."""
        return self.action_embedding(actions) + self.action_position

    def class_label(self, actions: torch.Tensor, noise_bucket: torch.Tensor) -> torch.Tensor:
        if not self.config.last_action_embedding:
            return noise_bucket
        # Our addition to §3.2: the action that produces the next frame also enters every ResNet
        # block, jointly with the noise bucket, through the embedding added to the timestep's.
        # Small CPU-sized models then learn to follow it in minutes (docs/world_model.md).
        return noise_bucket * (self.config.n_actions + 1) + actions[:, -1]

    # The play fast path (docs/performance.md): the first convolution is linear in its input, so
    # conv_in(noisy ++ context) = conv_in's target part (noisy) + conv_in's context part (context).
    # The context is the same for all DDIM steps of a frame, and at 8 x 64 channels it is almost all
    # of conv_in's input, so its part is computed once per frame instead of once per step.

    def context_share(self, context: torch.Tensor) -> torch.Tensor:
        """context (B, N, C, h, w) -> conv_in's response to the context channels, bias included
        (B, C0, h, w)."""
        B, N, C, h, w = context.shape
        conv = self.unet.conv_in
        return nn.functional.conv2d(context.reshape(B, N * C, h, w), conv.weight[:, C:], conv.bias,
                                    padding=conv.padding)

    def forward_from_share(self, noisy: torch.Tensor, timesteps: torch.Tensor, share: torch.Tensor,
                           actions: torch.Tensor, noise_bucket: torch.Tensor) -> torch.Tensor:
        """``forward`` with the context given as its ``context_share``; the same v_pred.

        It swaps conv_in for the call, so it must not run beside ``forward`` on another thread: play
        calls it once, to export the graph, before any player shares the network."""
        conv_in = self.unet.conv_in
        self.unet.conv_in = _TargetConvIn(conv_in, share)
        try:
            return self.unet(noisy, timesteps, encoder_hidden_states=self.tokens(actions),
                             class_labels=self.class_label(actions, noise_bucket)).sample
        finally:
            self.unet.conv_in = conv_in


class _TargetConvIn(nn.Module):
    """conv_in on the noisy target's channels alone, plus the precomputed context share."""

    def __init__(self, conv: nn.Conv2d, share: torch.Tensor):
        super().__init__()
        self.conv, self.share = conv, share

    def forward(self, noisy: torch.Tensor) -> torch.Tensor:
        weight = self.conv.weight[:, : noisy.shape[1]]
        return nn.functional.conv2d(noisy, weight, None, padding=self.conv.padding) + self.share
