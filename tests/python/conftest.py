"""Splits one test file's cases over several ctest entries so `ctest -j` can run them side
by side: with RIDGE_PYTEST_SHARD="K/N" (set by tests/CMakeLists.txt) only every N-th
collected case from the K-th (0-based) runs; without it, all of them."""

from __future__ import annotations

import os

import pytest


def _shard() -> tuple[int, int] | None:
    value = os.environ.get("RIDGE_PYTEST_SHARD", "")
    if not value:
        return None
    try:
        k, n = (int(part) for part in value.split("/"))
    except ValueError:
        raise pytest.UsageError(f"RIDGE_PYTEST_SHARD={value!r}: expected K/N, e.g. 0/3") from None
    if not 0 <= k < n:
        raise pytest.UsageError(f"RIDGE_PYTEST_SHARD={value!r}: K must be in [0, N)")
    return k, n


def pytest_collection_modifyitems(config, items):
    shard = _shard()
    if shard is None:
        return
    k, n = shard
    keep = [item for i, item in enumerate(items) if i % n == k]
    config.hook.pytest_deselected(items=[item for i, item in enumerate(items) if i % n != k])
    items[:] = keep
