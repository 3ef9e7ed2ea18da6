"""Which verl the shim supports, and a fingerprint of the verl code it restates or relies on.

The rlhooks trainer restates verl's legacy ``RayPPOTrainer.fit()`` and calls private
``RayPPOTrainer`` members, so a verl release can break it without an API change. Two guards:

* :func:`check_verl_version` (``rlhooks train`` and the trainer call it before touching verl):
  a verl outside :data:`SUPPORTED` is one clear error naming the range, not an AttributeError in
  the middle of a run. ``RLHOOKS_ALLOW_UNSUPPORTED_VERL=1`` turns the error into a warning.
* :func:`fingerprints`: a hash of the source of each verl member in :data:`RELIED_ON`, compared
  with the hashes recorded per verl version in ``verl_fingerprints.json``. A test fails when they
  differ; the trainer warns at start-up. After reviewing the change in verl (and the shim),
  record the installed version's hashes with ``python -m rlhooks.engines.verl.compat --record``.

This module imports nothing from verl at import time.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import inspect
import json
import os
import sys
from importlib import metadata
from pathlib import Path

from rlhooks.core.errors import RLHooksError

#: verl releases the shim is written against (pyproject's ``verl`` extra says the same)
SUPPORTED = ">=0.9.1,<0.10"
ALLOW_ENV = "RLHOOKS_ALLOW_UNSUPPORTED_VERL"
FINGERPRINT_FILE = Path(__file__).with_name("verl_fingerprints.json")
RECORD_COMMAND = "python -m rlhooks.engines.verl.compat --record"

_TRAINER = "verl.trainer.ppo.ray_trainer:RayPPOTrainer."
#: verl code the shim restates (fit) or calls / overrides (the private members), by qualified name
RELIED_ON: tuple[str, ...] = (
    _TRAINER + "fit",  # restated step by step in RLHooksRayPPOTrainer.fit and its helpers
    _TRAINER + "__init__",  # sets the attributes the shim reads (use_rm, kl_ctrl_in_reward, _dump_executor, ...)
    *(_TRAINER + name for name in (
        "_create_dataloader", "_validate", "_init_dump_executor", "_shutdown_dump_executor",
        "_start_profiling", "_stop_profiling", "_get_gen_batch", "_compute_reward_colocate",
        "_balance_batch", "_compute_old_log_prob", "_compute_ref_log_prob", "_compute_values",
        "_update_actor", "_update_critic", "_save_checkpoint", "_load_checkpoint", "_log_rollout_data",
    )),
    "verl.trainer.ppo.ray_trainer:apply_kl_penalty",
    "verl.trainer.ppo.ray_trainer:compute_advantage",
    "verl.trainer.ppo.ray_trainer:compute_response_mask",
    "verl.trainer.ppo.reward:extract_reward",
    "verl.trainer.main_ppo_v0:TaskRunner.run",  # run by the rlhooks TaskRunner with the trainer class swapped
)


class UnsupportedVerlError(RLHooksError):
    """The installed verl is outside the supported range (or not installed)."""


def installed_verl_version() -> str | None:
    try:
        return metadata.version("verl")
    except metadata.PackageNotFoundError:
        return None


def check_verl_version(version: str | None = None) -> str:
    """The installed verl version; UnsupportedVerlError when it is missing or outside SUPPORTED."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    version = version if version is not None else installed_verl_version()
    if version is None:
        raise UnsupportedVerlError(
            f"verl is not installed; rlhooks train needs verl {SUPPORTED}: pip install -e '.[verl]' in the rlhooks clone"
        )
    try:
        ok = Version(version) in SpecifierSet(SUPPORTED)
    except InvalidVersion:
        ok = False
    if not ok:
        message = (f"verl {version} is installed, but the rlhooks verl trainer supports verl {SUPPORTED} "
                   f"(it restates parts of verl's RayPPOTrainer.fit); install a supported verl "
                   f"(pip install -e '.[verl]' in the rlhooks clone), or set {ALLOW_ENV}=1 to try this one at your own risk")
        if os.environ.get(ALLOW_ENV, "").strip().lower() in ("1", "true", "yes"):
            import structlog

            structlog.get_logger("rlhooks.verl").warning(message)
        else:
            raise UnsupportedVerlError(message)
    return version


def _resolve(qualname: str) -> object:
    module_name, _, attr_path = qualname.partition(":")
    obj: object = importlib.import_module(module_name)
    for part in attr_path.split("."):
        obj = getattr(obj, part)
        meta = getattr(obj, "__ray_metadata__", None)  # a @ray.remote class: the user's class inside
        if meta is not None and hasattr(meta, "modified_class"):
            obj = meta.modified_class
    return obj


def fingerprints() -> dict[str, str]:
    """sha256 of the source of each member in RELIED_ON (``missing`` when verl no longer has it)."""
    out = {}
    for name in RELIED_ON:
        try:
            source = inspect.getsource(_resolve(name))  # type: ignore[arg-type]
        except (AttributeError, ImportError, OSError, TypeError):
            out[name] = "missing"
            continue
        out[name] = hashlib.sha256(source.encode()).hexdigest()[:16]
    return out


def recorded() -> dict[str, dict[str, str]]:
    """verl version -> {member: hash}, as reviewed and recorded."""
    return json.loads(FINGERPRINT_FILE.read_text()) if FINGERPRINT_FILE.exists() else {}


def drift(version: str | None = None) -> tuple[dict[str, str] | None, list[str]]:
    """(the recorded fingerprints of the installed version or None, members whose source differs)."""
    version = version or installed_verl_version() or "?"
    known = recorded().get(version)
    if known is None:
        return None, list(RELIED_ON)
    now = fingerprints()
    changed = sorted(n for n in set(now) | set(known) if now.get(n) != known.get(n))
    return known, changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlhooks.engines.verl.compat", description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true",
                        help="record the installed verl's fingerprints (after reviewing its changes)")
    args = parser.parse_args(argv)
    version = check_verl_version()
    known, changed = drift(version)
    if args.record:
        data = recorded()
        data[version] = fingerprints()
        FINGERPRINT_FILE.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"recorded the fingerprints of verl {version} in {FINGERPRINT_FILE.name}")
        return 0
    if known is None:
        print(f"verl {version}: no fingerprints recorded; review the shim against it, then run {RECORD_COMMAND}")
        return 1
    print(f"verl {version}: " + (f"changed since recorded: {', '.join(changed)}" if changed else "matches the record"))
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
