"""Write a gamengen trajectory store for a made-up game with numpy and zarr alone (docs/dataset.md).

Usage: python write_store_plain.py OUT_FOLDER [SEED]. The game: a square bounces up and down a
160x120 screen; the player moves it LEFT, STAY or RIGHT. Each SEED writes its own shard, so stores
of different seeds merge by copying shard folders side by side. A re-run skips listed episodes.
"""

import hashlib
import json
import os
import sys

import numpy as np
import zarr

H, W, SIZE = 120, 160, 12
LENGTHS = (100, 77)  # steps per episode; neither is a multiple of 32, so last chunks are partial
STORE_JSON = {
    "format": "gamengen-trajectory-store", "version": 1, "env_id": "plain:bouncing-square",
    "height": H, "width": W, "action_set": {"names": ["LEFT", "STAY", "RIGHT"], "buttons": [], "combos": []},
    "frame_skip": 1, "fps": 30.0, "variables": ["x", "y"], "images": [], "compression_level": 1,
}


def render(x, y):
    frame = np.full((H, W, 3), 40, np.uint8)
    frame[y : y + SIZE, x : x + SIZE] = (255, 200, 0)
    return frame


def step(state, action):
    """The game rule: the action moves the square sideways; it bounces up and down on its own."""
    x, y, vy = state
    x = min(max(x + 4 * (action - 1), 0), W - SIZE)
    y, reward = y + vy, 0.0
    if not 0 <= y <= H - SIZE:  # hit the ceiling or the floor: bounce
        reward = 1.0 if vy > 0 else 0.0  # +1 for each floor bounce
        y, vy = min(max(y, 0), H - SIZE), -vy
    return (x, y, vy), reward


def play(seed, length):
    """One episode. frames[t] is shown, then actions[t] is taken; its outcome is rewards[t]."""
    rng = np.random.default_rng(seed)
    state, action = (W // 2 - SIZE // 2, int(rng.integers(0, H - SIZE)), 3), 1
    frames, actions, rewards, variables = [], [], [], []
    for _ in range(length):
        frames.append(render(*state[:2]))
        variables.append(state[:2])  # game variables describe the frame of the same step
        if rng.random() < 0.2:
            action = int(rng.integers(3))  # sticky random play
        state, reward = step(state, action)
        actions.append(action)
        rewards.append(reward)
    # The frame produced by the last action is not stored: the episode has `length` frames and actions.
    truncated = np.arange(length) == length - 1  # cut by a time limit, flagged on the last step only
    return {"frames": np.stack(frames), "actions": np.array(actions, np.int16),
            "rewards": np.array(rewards, np.float32), "terminated": np.zeros(length, bool),
            "truncated": truncated, "game_variables": np.array(variables, np.float32)}


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def write_json_atomic(path, obj):
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
    fsync_path(os.path.dirname(path))


def tree_sha256(folder):
    """Every file, ordered by its path compared component by component: path, NUL, size, NUL, bytes."""
    rels = [os.path.relpath(os.path.join(d, f), folder).replace(os.sep, "/")
            for d, _, files in os.walk(folder) for f in files]
    h = hashlib.sha256()
    for rel in sorted(rels, key=lambda r: r.split("/")):
        with open(os.path.join(folder, rel), "rb") as f:
            data = f.read()
            os.fsync(f.fileno())  # durable before the rename makes the episode visible
        h.update(f"{rel}\0{len(data)}\0".encode() + data)
    for d, _, _ in os.walk(folder, topdown=False):
        fsync_path(d)
    return h.hexdigest()


def write_episode(shard_dir, shard, episode_id, arrays, meta):
    tmp, final = os.path.join(shard_dir, ".tmp-" + episode_id), os.path.join(shard_dir, episode_id)
    if os.path.exists(final):  # renamed but never listed (killed before the manifest append): redo it
        os.rename(final, tmp)
    g = zarr.open_group(tmp, mode="w", zarr_format=3)  # "w" wipes whatever a killed run left there
    for name, data in arrays.items():
        g.create_array(name, data=data,
                       chunks=(32, H, W, 3) if name == "frames" else data.shape,  # 32 frames a chunk
                       compressors=[zarr.codecs.ZstdCodec(level=1), zarr.codecs.Crc32cCodec()],
                       chunk_key_encoding={"name": "default", "separator": "."})
    g.attrs.update({"length": len(arrays["actions"]), "meta": meta, **STORE_JSON})
    digest = tree_sha256(tmp)  # also fsyncs every file and folder
    os.rename(tmp, final)
    fsync_path(shard_dir)
    line = json.dumps({"id": episode_id, "shard": shard, "length": len(arrays["actions"]),
                       "sha256": digest, "meta": meta}) + "\n"
    fd = os.open(os.path.join(shard_dir, "manifest.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, line.encode())  # one write: a kill leaves the whole line or none of it
    os.fsync(fd)
    os.close(fd)


def main(root, seed):
    os.makedirs(root, exist_ok=True)
    spec_path = os.path.join(root, "store.json")
    if os.path.exists(spec_path):
        with open(spec_path) as f:
            if json.load(f) != STORE_JSON:
                sys.exit(f"{root} holds another game's store; pick a new folder")
    else:
        write_json_atomic(spec_path, STORE_JSON)
    shard = f"plain-s{seed}"
    shard_dir = os.path.join(root, shard)
    os.makedirs(shard_dir, exist_ok=True)
    write_json_atomic(os.path.join(shard_dir, "shard.json"), {"writer": "write_store_plain.py", "seed": seed})
    manifest = os.path.join(shard_dir, "manifest.jsonl")
    with open(manifest, "a+") as f:
        f.seek(0)
        listed = {json.loads(line)["id"] for line in f if line.strip()}
    for index, length in enumerate(LENGTHS):
        episode_id = f"e{index:06d}"
        if episode_id in listed:
            continue  # resume: already complete
        arrays = play(seed * 1000 + index, length)
        meta = {"policy": "sticky-random", "seed": seed, "index": index, "return": float(arrays["rewards"].sum()),
                "terminated": False, "truncated": True}
        write_episode(shard_dir, shard, episode_id, arrays, meta)
    print(f"{root}: shard {shard}, {len(LENGTHS)} episodes, {sum(LENGTHS)} frames")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0)
