"""Training loops (accelerate-aware) and their crash-safe checkpoints (DESIGN §5, §10)."""
