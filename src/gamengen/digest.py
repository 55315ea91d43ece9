"""Short content digests: cache keys and "trained beside which weights" checks."""

from __future__ import annotations

import hashlib
import json

import torch


def digest(*parts) -> str:
    """sha256 over state dicts (every tensor, by name) and JSON-able values, 16 hex digits."""
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, dict) and part and all(isinstance(v, torch.Tensor) for v in part.values()):
            for k, v in sorted(part.items()):
                h.update(k.encode())
                h.update(v.detach().cpu().contiguous().numpy().tobytes())
        else:
            h.update(json.dumps(part, sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]
