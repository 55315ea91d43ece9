"""Diffusion around the network: the denoiser wrapper (conditioning, loss) and samplers (docs/world_model.md)."""
