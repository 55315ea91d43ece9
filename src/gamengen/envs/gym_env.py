"""Any gymnasium env with a discrete action space and pixels, and Atari through ale-py.

Ids: ``gym:<registered id>`` (e.g. ``gym:ALE/Pong-v5``) and ``atari:<Game>`` (e.g. ``atari:Breakout``).
Pixels come from the observation when it is an (H, W, 3) uint8 image, else from ``render()``.
"""

from __future__ import annotations

import numpy as np

from ..errors import UserError
from .base import ActionSet, EnvConfig, Step, resize_frame


class GymEnv:
    _own_skip = False  # True when the env applies config.frame_skip itself
    def __init__(self, env_id: str, gym_id: str, config: EnvConfig, **make_kwargs):
        import gymnasium as gym

        try:
            import ale_py

            gym.register_envs(ale_py)  # ALE/* ids; the ROMs ship inside the ale-py wheel
            ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner on stderr
        except ImportError:  # pragma: no cover - ale-py is a dependency
            pass
        try:
            self._env = gym.make(gym_id, render_mode="rgb_array", **make_kwargs)
        except gym.error.Error as e:
            raise UserError(f"gymnasium cannot make '{gym_id}': {str(e).splitlines()[0]}",
                            "check the id with gymnasium.pprint_registry()") from None
        space = self._env.action_space
        if not isinstance(space, gym.spaces.Discrete):
            self._env.close()
            raise UserError(f"'{gym_id}' has a {type(space).__name__} action space", "use an env with discrete actions")
        self.env_id = env_id
        self.config = config
        meanings = getattr(self._env.unwrapped, "get_action_meanings", None)
        names = tuple(meanings()) if meanings else tuple(f"A{i}" for i in range(space.n))
        self.action_set = ActionSet(names)
        # numeric scalars of info become game variables (e.g. Atari lives); a first reset finds them
        _, info = self._env.reset(seed=0)
        self.variable_names = tuple(sorted(k for k, v in info.items() if np.isscalar(v) and np.isreal(v)))
        self.image_names = ()
        self.fps = float(self._env.metadata.get("render_fps") or 30) / config.frame_skip
        self.game_version = f"gymnasium {gym.__version__}"
        if gym_id.startswith("ALE/"):
            self.game_version += f", ale-py {ale_py.__version__}"

    def _pixels(self, obs) -> np.ndarray:
        if isinstance(obs, np.ndarray) and obs.dtype == np.uint8 and obs.ndim == 3 and obs.shape[-1] == 3:
            frame = obs
        else:
            frame = self._env.render()
        return resize_frame(frame, self.config.height, self.config.width)

    def _variables(self, info: dict) -> dict[str, float]:
        return {k: float(info[k]) if k in info else float("nan") for k in self.variable_names}

    def reset(self, seed: int) -> Step:
        obs, info = self._env.reset(seed=int(seed) % (2**31))
        return Step(self._pixels(obs), variables=self._variables(info))

    def step(self, action: int) -> Step:
        reward, terminated, truncated = 0.0, False, False
        # Atari does its own frame skip; other envs repeat the action here.
        repeats = 1 if self._own_skip else self.config.frame_skip
        for _ in range(repeats):
            obs, r, terminated, truncated, info = self._env.step(int(action))
            reward += float(r)
            if terminated or truncated:
                break
        return Step(self._pixels(obs), reward, bool(terminated), bool(truncated), self._variables(info))

    def close(self) -> None:
        self._env.close()


class AtariEnv(GymEnv):
    """ALE game by name. Sticky actions are off so the recorded action is the applied action."""

    _own_skip = True

    def __init__(self, game: str, config: EnvConfig):
        super().__init__(f"atari:{game}", f"ALE/{game}-v5", config,
                         frameskip=config.frame_skip, repeat_action_probability=0.0)
        self.fps = 60.0 / config.frame_skip  # the Atari 2600 runs at 60 frames per second
