"""The guard of the test files that run SGLang 0.5.23 itself: skipped where it cannot be
imported, unless URC_REQUIRE_SGLANG is set (CI's bridge run), which makes that a failure."""

from __future__ import annotations

import os

import pytest

from workbench.bridge.sglang_env import SGLANG_VERSION, installed_version


def sglang_importable() -> bool:
    if installed_version() != SGLANG_VERSION:
        return False
    try:
        from workbench.bridge.sglang_env import sglang_api

        sglang_api()
        return True
    except Exception:
        return False


def requires_sglang() -> pytest.MarkDecorator:
    """The module mark: skip without SGLang (fail instead under URC_REQUIRE_SGLANG)."""
    importable = sglang_importable()
    if os.environ.get("URC_REQUIRE_SGLANG") and not importable:
        raise RuntimeError(f"URC_REQUIRE_SGLANG is set but SGLang {SGLANG_VERSION} cannot be imported")
    return pytest.mark.skipif(not importable, reason=f"needs SGLang {SGLANG_VERSION} importable (make bridge-setup, then make bridge-test)")
