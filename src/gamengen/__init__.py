"""gamengen: learn a game from recorded play, then play the learned game in real time.

Layers (docs/architecture.md): envs (real games) -> data (trajectory store) -> model -> engine -> front-ends.
"""

__version__ = "0.1.0"
