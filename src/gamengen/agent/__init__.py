"""Stage 1 (paper §3.1, §4.1, App. A.3): a PPO agent whose whole training run is recorded."""
