"""Small real distributions pip-installed into site directories, once per test run.

pip costs ~2 s a process here. The pytest-xdist workers of one run share each site directory: the first
worker that needs it installs every distribution of the site in one pip process, under a file lock, and
the others wait for it and reuse it. A shared site, and any source tree its build leaves beside it, is
read only once built (tests put the site on ``sys.path``); a test that must change an installed
distribution installs its own.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest


def write_dist(root: Path, dist: str, version: str, module: str, code: str, entry_points: dict[str, dict[str, str]]) -> Path:
    """A minimal source distribution: pyproject with entry points and one module."""
    src = root / f"{dist}-src"
    (src / module).mkdir(parents=True)
    (src / module / "__init__.py").write_text(textwrap.dedent(code))
    eps = "\n".join(
        f'[project.entry-points."{group}"]\n' + "\n".join(f'{k} = "{v}"' for k, v in names.items())
        for group, names in entry_points.items()
    )
    (src / "pyproject.toml").write_text(textwrap.dedent(f"""\
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "{dist}"
        version = "{version}"

        [tool.setuptools]
        packages = ["{module}"]

        """) + eps + "\n")
    return src


def pip_install(target: Path, *sources: Path) -> None:
    """``pip install --target`` of local source trees (no dependencies, no build isolation), in one process."""
    res = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "--target", str(target), *map(str, sources)],
        capture_output=True, text=True, timeout=300,
    )
    if res.returncode != 0:
        raise RuntimeError(f"pip install --target {target} of {[str(s) for s in sources]} failed "
                           f"(exit {res.returncode}):\n{res.stdout}\n{res.stderr}")


def shared_site(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], Path]) -> Path:
    """The site directory ``build(root)`` installs under an empty ``root``, built once per test run.

    Under pytest-xdist, ``root`` lies in the run's base temporary directory, which all its workers share
    (and no other run); a single-process run builds it in its own."""
    base = tmp_path_factory.getbasetemp()
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # also inherited by a pytest a test starts: check the folder
    if worker and base.name == f"popen-{worker}":
        base = base.parent
    root = base / f"site-{name}"
    with open(base / f"site-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this worker dies
        built = root / ".built"  # written last, by rename: it exists only for a finished build
        if built.is_file():
            return Path(built.read_text())
        if root.exists():  # a build this run started and did not finish (its worker died)
            shutil.rmtree(root)
        root.mkdir()
        site = build(root)
        (root / ".built.tmp").write_text(str(site))
        (root / ".built.tmp").rename(built)
        return site
