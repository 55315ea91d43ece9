"""Networks: the latent autoencoder and the action-conditioned U-Net (docs/world_model.md)."""
