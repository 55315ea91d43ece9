"""bf16 on the CPU: whether this CPU has bf16 units, and the autocast the sampling commands run under.

CPUs with AVX-512 bf16 (or AMX) run bf16 matrix products natively, about twice fp32's rate; others
emulate them, an order of magnitude slower than fp32. So bf16 pays only where ``native_bf16()``.
"""

from __future__ import annotations

import torch


def native_bf16() -> bool | None:
    """Does this CPU run bf16 matrix products natively? None where torch cannot say."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch without the query
        return None


def bf16_autocast(enabled: bool):
    """bf16 autocast on the CPU when ``enabled`` (a no-op context otherwise). Matrix products and
    convolutions run in bf16; code that adds their outputs into fp32 tensors keeps those fp32."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=enabled)
