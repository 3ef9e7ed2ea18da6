"""A size-limited filesystem for tests of a full disk: a tmpfs mounted for the test (root only)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (mount's syntax: ``200k``) mounted at ``where`` (created) for the block. Mounting needs
    root: without it the test skips saying so, except in CI (``CI`` set), which runs as root and must not skip."""
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                             capture_output=True, text=True) if os.geteuid() == 0 else None
    if mounted is None or mounted.returncode != 0:
        why = f"mounting a {size} tmpfs needs root: {mounted.stderr.strip() if mounted else 'not root'}"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
