"""Put a server's Player together from command-line choices: the learned game (optionally with its
ghost), or the real game for human recording."""

from __future__ import annotations

import html
from pathlib import Path

from ..envs import ActionSet, EnvConfig, make_env
from ..errors import UserError
from .games import GhostGame, NeuralGame, RealGame
from .keymap import ActionResolver, Keymap
from .server import Player


def _keymap(env_id: str, keymap: Path | None) -> Keymap:
    return Keymap.load(keymap) if keymap else Keymap.for_env(env_id)


def neural_player(model_dir: Path, ghost: bool = False, keymap: Path | None = None, engine=None) -> Player:
    from ..engine.world import NeuralWorld
    from ..models.world_model import WorldModel

    world = NeuralWorld(model_dir, engine)
    starts = world.starts or WorldModel.load_starts(model_dir)  # none: load_starts says how to make them
    meta = world.meta
    action_set = ActionSet.from_json(meta.action_set)
    if ghost and any(s.env_seed is None for s in starts):
        raise UserError(f"the start contexts in {model_dir} have no env seeds, so the real game cannot replay them",
                        f"remake them with `gamengen starts --model {model_dir} --data STORE`")

    def make_game():
        game = NeuralGame(world, starts)
        return GhostGame(game, RealGame(meta.env_id, meta.height, meta.width, starts,
                                                    frame_skip=meta.frame_skip)) if ghost else game

    info = {"model": Path(model_dir).name, "context": meta.context, "DDIM steps": world.steps}
    return Player(make_game, ActionResolver(_keymap(meta.env_id, keymap), action_set), len(starts),
                  html.escape(f"{meta.env_id}, learned" + (" (ghost: real game beside it)" if ghost else "")), info,
                  fps=meta.fps)


def human_player(env_id: str, out: Path, height: int, width: int, seed: int = 0, keymap: Path | None = None):
    """(Player, HumanRecording): the real game, every step into the store at ``out``."""
    from .human import HumanRecording

    recording = HumanRecording(str(out), env_id, height, width, seed)
    env = make_env(env_id, EnvConfig(height=height, width=width))
    action_set = env.action_set
    env.close()

    def make_game():
        return RealGame(env_id, height, width, recording=recording)

    player = Player(make_game, ActionResolver(_keymap(env_id, keymap), action_set), 1,
                    html.escape(f"{env_id}, recording your play into {out}"), {"store": str(out)}, fps=env.fps)
    return player, recording
