"""The shaped reward of GameNGen App. A.3 (docs/agent.md), computed from ViZDoom game variables.

The goal is not a high score but human-like, diverse play: the agent is paid for fighting, picking
things up and, above all, for reaching parts of the map it has not seen in this episode.
"""

from __future__ import annotations

from dataclasses import dataclass

CELL = 64.0  # map units per exploration cell: DOOM's 64-unit grid (the size of a floor texture tile)
AMMO = ("AMMO2", "AMMO3", "AMMO5", "AMMO6")  # bullets, shells, rockets, cells
NEEDED = ("HEALTH", "ARMOR", "KILLCOUNT", "ITEMCOUNT", "SECRETCOUNT", "HITCOUNT", "HITS_TAKEN",
          "POSITION_X", "POSITION_Y", *AMMO)


@dataclass
class RewardConfig:
    """Points per event; defaults are the paper's (App. A.3)."""

    player_hit: float = -100.0
    player_death: float = -5000.0
    enemy_hit: float = 300.0
    enemy_kill: float = 1000.0
    item_pickup: float = 100.0
    secret: float = 500.0
    # A new cell pays area_base * (1 + area_distance * L1 distance in cells from the episode's start),
    # so pushing further out pays more than circling near the spawn point.
    area_base: float = 20.0
    area_distance: float = 0.5
    health_delta: float = 10.0
    armor_delta: float = 10.0
    ammo_gain: float = 10.0  # per unit of ammo gained ...
    ammo_spend: float = 1.0  # ... and per unit spent (so firing is cheap but not free)


def cell_of(variables: dict[str, float]) -> tuple[int, int]:
    return int(variables["POSITION_X"] // CELL), int(variables["POSITION_Y"] // CELL)


class ShapedReward:
    """Per-episode state: the last variables and the cells visited. ``step`` returns the reward
    earned between two consecutive observations."""

    def __init__(self, config: RewardConfig | None = None):
        self.config = config or RewardConfig()

    def reset(self, variables: dict[str, float]) -> None:
        missing = [v for v in NEEDED if v not in variables]
        if missing:
            raise ValueError(f"the shaped reward needs game variables {missing}")
        self.last = dict(variables)
        self.start = cell_of(variables)
        self.visited = {self.start}
        self.kills = 0

    @property
    def coverage(self) -> int:
        """Distinct 64x64-unit cells visited so far (the agent report's map coverage)."""
        return len(self.visited)

    def step(self, variables: dict[str, float]) -> float:
        c, last = self.config, self.last
        if "POSITION_X" not in variables:  # episode over: ViZDoom gives only DEAD (death vs map exit)
            return c.player_death if variables.get("DEAD") else 0.0
        d = {k: variables[k] - last[k] for k in NEEDED}
        self.kills += max(0, int(d["KILLCOUNT"]))
        r = (c.player_hit * max(0.0, d["HITS_TAKEN"]) + c.enemy_hit * max(0.0, d["HITCOUNT"])
             + c.enemy_kill * max(0.0, d["KILLCOUNT"]) + c.item_pickup * max(0.0, d["ITEMCOUNT"])
             + c.secret * max(0.0, d["SECRETCOUNT"])
             + c.health_delta * d["HEALTH"] + c.armor_delta * d["ARMOR"])
        ammo = sum(d[a] for a in AMMO)
        r += c.ammo_gain * max(0.0, ammo) + c.ammo_spend * min(0.0, ammo)
        cell = cell_of(variables)
        if cell not in self.visited:
            self.visited.add(cell)
            dist = abs(cell[0] - self.start[0]) + abs(cell[1] - self.start[1])
            r += c.area_base * (1.0 + c.area_distance * dist)
        self.last = dict(variables)
        return r
