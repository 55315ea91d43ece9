"""Training loops (accelerate-aware) and their crash-safe checkpoints (docs/world_model.md, docs/architecture.md)."""
