"""Every test folder is a package and imports its helpers relatively: no sys.path manipulation."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_every_test_folder_is_a_package() -> None:
    folders = {p.parent for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts}
    missing = sorted(str(f.relative_to(TESTS.parent)) for f in folders if not (f / "__init__.py").exists())
    assert not missing, f"test folders without __init__.py (helpers then need sys.path tricks): {missing}"


def test_no_test_module_edits_sys_path() -> None:
    edits = re.compile(r"sys\.path\.(insert|append|extend)\(|sys\.path\s*\+?=")
    offenders = [
        f"{p.relative_to(TESTS.parent)}:{n}"
        for p in TESTS.rglob("*.py") if p.name != Path(__file__).name
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if edits.search(line) and not line.lstrip().startswith("#")
    ]
    assert not offenders, f"sys.path edits in tests (import helpers relatively instead): {offenders}"
