"""``pip install`` for the Makefile's set-up, through uv where it can: a fresh machine's ``make setup-test
setup-docs`` took 266 s with pip and 68 s with uv (idle 2-core AMD EPYC, 2026-11-28 and 11-29; docs/DEVELOPMENT.md).

    python scripts/pip_install.py [pip install arguments...]

uv reads none of pip's configuration, so pip's own (its config files and ``PIP_*`` variables, as ``pip config
list`` reports them: find-links, index URLs, constraints, certificate bundle, timeout) goes over as uv's options,
with pip's rule for several indexes (the best version from any of them). Falls back to pip itself where uv cannot
be installed, pip's configuration holds a key this does not translate, or uv's install fails. Byte-compiled like
pip's installs.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
#: pip configuration keys -> uv options (repeated for each value of a list)
LIST_OPTIONS = {"find-links": "--find-links", "extra-index-url": "--extra-index-url", "constraint": "--constraint"}
#: keys that change nothing uv does here (``config-file``: the file's settings are in the listing already;
#: ``cache-dir``: pip's cache, uv keeps its own)
IGNORED = {"disable-pip-version-check", "no-cache-dir", "cache-dir", "config-file", "progress-bar", "no-color",
           "quiet", "verbose", "root-user-action", "no-input", "require-virtualenv"}
#: pip's aliases of one option, under one name
ALIASES = {"default-timeout": "timeout"}
#: later sections win, as in pip (the environment over the ``install`` section over ``global``)
SECTIONS = ("global", "install", ":env:")


def pip_config() -> dict[str, str]:
    """pip's effective configuration, key -> value (``pip config list``)."""
    listing = subprocess.run([*PIP, "config", "list"], capture_output=True, text=True, check=True).stdout
    found: dict[str, dict[str, str]] = {}
    for line in listing.splitlines():
        key, _, value = line.partition("=")
        section, _, name = key.rpartition(".")
        if section in SECTIONS:
            found.setdefault(section, {})[ALIASES.get(name, name)] = ast.literal_eval(value)
    merged: dict[str, str] = {}
    for section in SECTIONS:
        merged.update(found.get(section, {}))
    return merged


def uv_command(config: dict[str, str]) -> tuple[list[str], dict[str, str]] | None:
    """uv's options and environment for pip's ``config``; None where a key has no translation here."""
    options = ["--index-strategy", "unsafe-best-match", "--compile-bytecode"]
    env: dict[str, str] = {}
    for key, value in config.items():
        key = ALIASES.get(key, key)
        if key in LIST_OPTIONS:
            for item in value.split():
                options += [LIST_OPTIONS[key], item]
        elif key == "index-url":
            options += ["--index-url", value]
        elif key == "no-index":
            if value.strip().lower() in ("1", "true", "yes", "on", "y", "t"):  # pip reads it as a boolean
                options.append("--no-index")
        elif key == "cert":
            env["SSL_CERT_FILE"] = value
        elif key == "timeout":
            env["UV_HTTP_TIMEOUT"] = str(int(float(value)))
        elif key not in IGNORED:
            print(f"scripts/pip_install.py: pip's configuration sets {key!r}, which this does not pass to uv: "
                  "installing with pip", file=sys.stderr)
            return None
    return options, env


def uv_binary() -> str | None:
    """uv from this environment, installed into it first if missing; None if it cannot be."""
    try:
        import uv
    except ImportError:
        # quickly given up: pip's own install follows, and no local index here holds uv
        if subprocess.run([*PIP, "install", "--quiet", "--retries", "1", "--timeout", "30", "uv"]).returncode != 0:
            return None
        import importlib

        importlib.invalidate_caches()
        try:
            import uv
        except ImportError:
            return None
    return uv.find_uv_bin()


def main(args: list[str]) -> int:
    translated = uv_command(pip_config())
    uv = uv_binary() if translated is not None else None
    if uv is None or translated is None:
        return subprocess.run([*PIP, "install", *args]).returncode
    options, env = translated
    code = subprocess.run([uv, "pip", "install", "--python", sys.executable, *options, *args],
                          env={**os.environ, **env}).returncode
    if code != 0:  # pip's own resolution and messages are what the configuration was written for
        print(f"scripts/pip_install.py: uv exited {code}; installing with pip", file=sys.stderr)
        return subprocess.run([*PIP, "install", *args]).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
