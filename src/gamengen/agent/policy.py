"""The agent's network (paper §4.1): a Nature-DQN CNN per image, the last 32 actions, 2-layer heads.

Exported policies are plain safetensors + JSON (never pickles), so `gamengen record --policy
agent:<dir>` can load a policy someone else trained without running their code.
"""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

from ..errors import UserError
from .env import observation_space, to_observation


def nature_cnn(channels: int, height: int, width: int, features: int) -> nn.Sequential:
    """Mnih et al. 2015's three convolutions and a linear layer, sized for one image."""
    convs = nn.Sequential(
        nn.Conv2d(channels, 32, 8, stride=4), nn.ReLU(),
        nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
        nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten())
    with torch.no_grad():
        n = convs(torch.zeros(1, channels, height, width)).shape[1]
    return nn.Sequential(convs, nn.Linear(n, features), nn.ReLU())


class AgentFeatures(BaseFeaturesExtractor):
    """[CNN(frame), CNN(automap), one-hot past actions] -> the heads' input.

    The CNNs run under bf16 autocast when ``bf16`` is set: on CPUs with bf16 units their training
    step is about 1.5x faster (460 vs 308 samples/s at batch 64 here); the heads (and so the
    log-probabilities PPO's ratio uses) stay in fp32.
    """

    def __init__(self, observation_space: gym.spaces.Dict, features_per_image: int = 512, bf16: bool = False):
        frame, automap, actions = (observation_space[k] for k in ("frame", "automap", "actions"))
        n_history = int(np.sum(actions.nvec))
        super().__init__(observation_space, 2 * features_per_image + n_history)
        self.frame_cnn = nature_cnn(frame.shape[0], *frame.shape[1:], features_per_image)
        self.automap_cnn = nature_cnn(automap.shape[0], *automap.shape[1:], features_per_image)
        self.bf16 = bf16

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        # SB3 has already scaled images to [0, 1] and one-hot encoded the MultiDiscrete actions
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16 and obs["frame"].device.type == "cpu"):
            f = self.frame_cnn(obs["frame"].contiguous(memory_format=torch.channels_last))
            a = self.automap_cnn(obs["automap"].contiguous(memory_format=torch.channels_last))
        return torch.cat([f.float(), a.float(), obs["actions"].float()], dim=1)


def policy_kwargs(features_per_image: int = 512, head_width: int = 256, bf16: bool = False) -> dict:
    return {"features_extractor_class": AgentFeatures,
            "features_extractor_kwargs": {"features_per_image": features_per_image, "bf16": bf16},
            "net_arch": {"pi": [head_width, head_width], "vf": [head_width, head_width]},
            # One fused Adam kernel instead of a loop over parameters: the step after each minibatch
            # of 64 (clip included) fell from 54 to 14 ms here; it was 44% of the minibatch (docs/agent.md, "Speed").
            "optimizer_kwargs": {"fused": True}}


def export_policy(policy: ActorCriticPolicy, out: Path, config: dict) -> None:
    """Write ``model.safetensors`` + ``config.json`` atomically (each file temp + fsync + rename)."""
    from safetensors.torch import save as save_tensors

    from ..atomic import write_bytes_atomic, write_json_atomic

    out.mkdir(parents=True, exist_ok=True)
    # SB3 lists the shared CNN three times (features_extractor, pi_/vf_features_extractor): keep one
    # name per tensor; safetensors' load_model re-ties the aliases.
    state, seen = {}, set()
    for k, v in policy.state_dict().items():
        if v.data_ptr() not in seen:
            seen.add(v.data_ptr())
            state[k] = v.detach().cpu().contiguous()
    write_bytes_atomic(out / "model.safetensors", save_tensors(state))
    write_json_atomic(out / "config.json", config)


def load_policy(folder: str | Path) -> tuple[ActorCriticPolicy, dict]:
    """An exported policy and its config; bad folders give a UserError."""
    from safetensors import SafetensorError
    from safetensors.torch import load_model

    folder = Path(folder)
    try:
        config = json.loads((folder / "config.json").read_text())
        config.setdefault("automap_pool", 1)  # policies exported before the option saw the full automap
        space = observation_space(config["height"], config["width"], len(config["actions"]), config["history"],
                                  config["automap_pool"])
        policy = ActorCriticPolicy(space, gym.spaces.Discrete(len(config["actions"])), lambda _: 0.0,
                                   **policy_kwargs(config["features_per_image"], config["head_width"]))
        load_model(policy, folder / "model.safetensors")
    except FileNotFoundError as e:
        raise UserError(f"no exported agent policy in {folder} ({Path(e.filename).name} missing)",
                        "point at the policy/ folder that `gamengen agent` writes into its run") from None
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise UserError(f"{folder}/config.json is not an agent policy config ({e})",
                        "re-export it with `gamengen agent`") from None
    except (SafetensorError, RuntimeError, OSError) as e:
        raise UserError(f"{folder}/model.safetensors does not load into the agent network ({str(e)[:120]})",
                        "re-export the policy with `gamengen agent`, or check it belongs to config.json") from None
    policy.set_training_mode(False)
    return policy, config


def export_fp16(src: str | Path, out: str | Path, card: str = "") -> None:
    """A copy of an exported policy with its weights in fp16: half the size, to commit or share.
    It loads into the fp32 network like the original (load_policy casts on copy)."""
    from safetensors.torch import load_file, save as save_tensors

    from ..atomic import write_bytes_atomic, write_json_atomic

    _, config = load_policy(src)  # refuses a folder that is not a policy, in one line
    state = load_file(Path(src) / "model.safetensors")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(out / "model.safetensors", save_tensors(
        {k: v.half() if v.is_floating_point() else v for k, v in state.items()}))
    write_json_atomic(out / "config.json", {**config, "weights": "fp16"})
    if card:
        write_bytes_atomic(out / "README.md", card.encode())


class AgentPolicy:
    """An exported agent as a `gamengen record` policy: decides every ``hold`` frames, with the same
    sticky repeats as in training, and samples its action (stochastic play is more varied data)."""

    def __init__(self, folder: str | Path, action_set):
        self.policy, self.config = load_policy(folder)
        if list(action_set.names) != self.config["actions"]:
            raise UserError(f"agent {folder} was trained with actions {self.config['actions']}, "
                            f"this game has {list(action_set.names)}", "record the game the agent was trained on")
        self.id = f"agent:{Path(folder).resolve().name}"
        self.n = len(action_set)

    def reset(self, rng: np.random.Generator) -> None:
        self.rng = rng
        torch.manual_seed(int(rng.integers(2**31)))
        self.t = 0
        self.action = None
        self.history = np.full(self.config["history"], self.n, np.int64)

    def act(self, obs) -> int:
        if self.t % self.config["hold"] == 0:
            if self.action is None or self.rng.random() >= self.config["repeat_prob"]:
                o = {k: v[None] for k, v in to_observation(obs, self.history, self.config["automap_pool"]).items()}
                with torch.no_grad():
                    self.action = int(self.policy.predict(o, deterministic=False)[0][0])
            self.history = np.roll(self.history, -1)
            self.history[-1] = self.action
        self.t += 1
        return self.action
