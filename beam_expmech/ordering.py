"""The order that sorts an array of non-negative integers, equal values keeping their order: what
``np.argsort(values, kind="stable")`` gives, by one sort of a 64-bit word a value (the value, then its position)
where the two fit, several times faster than an argsort. Bounding groups rows by unit with it, the row fitting
ranks proposals by cell."""

from __future__ import annotations

import numpy as np


def stable_order(values: np.ndarray) -> np.ndarray:
    """Positions that sort ``values`` (non-negative integers), equal values in their order (int64)."""
    if not values.size:
        return np.zeros(0, np.int64)
    position_bits = max(1, (values.size - 1).bit_length())
    if int(values.max()).bit_length() + position_bits > 64:
        return np.argsort(values, kind="stable")
    words = (values.astype(np.uint64, copy=False) << np.uint64(position_bits)) | np.arange(values.size, dtype=np.uint64)
    words.sort()
    return (words & np.uint64((1 << position_bits) - 1)).astype(np.int64)
