"""Diffusion around the network: the denoiser wrapper (conditioning, loss) and samplers (DESIGN §5)."""
