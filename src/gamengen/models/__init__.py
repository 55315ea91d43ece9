"""Networks: the latent autoencoder and the action-conditioned U-Net (DESIGN §5)."""
