"""The engine: the learned game as a stepping world and as a gymnasium env (docs/player.md)."""
