"""Game adapters behind one protocol (base.GameEnv), made from an env id string."""

from __future__ import annotations

from ..errors import UserError
from .base import ActionSet, EnvConfig, GameEnv, Step

ENV_ID_HELP = "use vizdoom:freedoom1/E1M1, vizdoom:scenario/basic, atari:Breakout, gym:<registered id> or toy:cursor"


def make_env(env_id: str, config: EnvConfig | None = None) -> GameEnv:
    """``kind:target`` -> adapter. Imports are lazy so a toy-game run never loads ViZDoom."""
    config = config or EnvConfig()
    kind, sep, target = env_id.partition(":")
    if not sep or not target:
        raise UserError(f"unknown env id '{env_id}'", ENV_ID_HELP)
    if kind == "vizdoom":
        from .vizdoom_env import VizdoomEnv

        return VizdoomEnv(target, config)
    if kind == "atari":
        from .gym_env import AtariEnv

        return AtariEnv(target, config)
    if kind == "gym":
        from .gym_env import GymEnv

        return GymEnv(env_id, target, config)
    if kind == "toy":
        from .toy import ToyEnv

        return ToyEnv(target, config)
    raise UserError(f"unknown env id '{env_id}'", ENV_ID_HELP)


__all__ = ["ActionSet", "EnvConfig", "GameEnv", "Step", "make_env", "ENV_ID_HELP"]
