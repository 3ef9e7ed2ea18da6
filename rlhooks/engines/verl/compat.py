"""Which verl the shim runs on: the fingerprints of the verl code it relies on decide, not the version.

The rlhooks trainer restates verl's legacy ``RayPPOTrainer.fit()``, calls private ``RayPPOTrainer``
members and relies on verl's workers, agent loop, checkpoint manager, metric functions and
``DataProto``, so a verl release can break it without an API change, and a release with a new
number can leave all of it untouched. :func:`check_verl` (``rlhooks train`` and the trainer's
constructor call it first) hashes the source of each member in :data:`RELIED_ON` and compares the
hashes with those recorded per reviewed verl version in ``verl_fingerprints.json``:

* they match a reviewed version: the run goes on (with a notice when the version is outside the
  tested range :data:`TESTED`, e.g. verl's main, whose code the shim relies on is 0.9.1's);
* they differ from every reviewed version: one error naming the changed members, unless the user
  opts in with ``RLHOOKS_ALLOW_UNSUPPORTED_VERL=1`` (then a warning).

After reviewing a new verl (and porting its changes into the shim), record its hashes with
``python -m rlhooks.engines.verl.compat --record``. This module imports nothing from verl at import time.
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

#: verl releases the shim was tested on in CI (pyproject's ``verl`` extra allows the next minor,
#: whose fingerprints decide at start-up)
TESTED = ">=0.9.1,<0.10"
SUPPORTED = TESTED  # the name before the fingerprint policy
ALLOW_ENV = "RLHOOKS_ALLOW_UNSUPPORTED_VERL"
FINGERPRINT_FILE = Path(__file__).with_name("verl_fingerprints.json")
RECORD_COMMAND = "python -m rlhooks.engines.verl.compat --record"

_TRAINER = "verl.trainer.ppo.ray_trainer:RayPPOTrainer."
_PROTO = "verl.protocol:DataProto."
#: verl code the shim restates (fit), calls or overrides, by qualified name
RELIED_ON: tuple[str, ...] = (
    _TRAINER + "fit",  # restated step by step in RLHooksRayPPOTrainer.fit and its helpers
    _TRAINER + "__init__",  # sets the attributes the shim reads (use_rm, kl_ctrl_in_reward, _dump_executor, ...)
    _TRAINER + "init_workers",  # builds the worker groups, rollout and checkpoint managers the shim calls
    *(_TRAINER + name for name in (
        "_create_dataloader", "_validate", "_init_dump_executor", "_shutdown_dump_executor",
        "_start_profiling", "_stop_profiling", "_get_gen_batch", "_compute_reward_colocate",
        "_balance_batch", "_compute_old_log_prob", "_compute_ref_log_prob", "_compute_values",
        "_update_actor", "_update_critic", "_save_checkpoint", "_load_checkpoint", "_log_rollout_data",
    )),  # _save_checkpoint: restated in checkpoints.CheckpointWriter.save (the order changed, see there)
    # what a complete checkpoint is (the files the loader reads) and the rotation the shim replaces
    "verl.utils.checkpoint.fsdp_checkpoint_manager:FSDPCheckpointManager.save_checkpoint",
    "verl.utils.checkpoint.fsdp_checkpoint_manager:FSDPCheckpointManager.load_checkpoint",
    "verl.trainer.ppo.ray_trainer:apply_kl_penalty",
    "verl.trainer.ppo.ray_trainer:compute_advantage",
    "verl.trainer.ppo.ray_trainer:compute_response_mask",
    "verl.trainer.ppo.ray_trainer:compute_spec_decode_metrics",
    "verl.trainer.ppo.reward:extract_reward",
    "verl.trainer.ppo.core_algos:agg_loss",
    "verl.trainer.main_ppo_v0:TaskRunner.run",  # run by the rlhooks TaskRunner with the trainer class swapped
    # what the step hands batches to and reads back from
    "verl.experimental.agent_loop.agent_loop:AgentLoopManager.generate_sequences",
    "verl.workers.engine_workers:TrainingWorker._postprocess_output",  # when metrics["mfu"] exists
    "verl.checkpoint_engine:CheckpointEngineManager.update_weights",
    "verl.checkpoint_engine:CheckpointEngineManager.sleep_replicas",
    "verl.utils.checkpoint.checkpoint_manager:find_latest_ckpt_path",
    "verl.utils.checkpoint.checkpoint_manager:should_save_ckpt_esi",
    # the metric functions the shim calls
    *(f"verl.trainer.ppo.metric_utils:{name}" for name in (
        "compute_data_metrics", "compute_timing_metrics", "compute_throughout_metrics",
        "compute_variance_proxy_metrics")),
    "verl.utils.metric:reduce_metrics",
    "verl.utils.debug.metrics:calculate_debug_metrics",
    "verl.trainer.ppo.rollout_corr_helper:apply_bypass_mode",
    "verl.trainer.ppo.rollout_corr_helper:compute_rollout_correction_and_add_to_batch",
    # the DataProto methods the shim and its adapter use (a copy-on-read DataProto is covered by
    # placing rewards by assignment; these catch a change of their rules)
    *(_PROTO + name for name in (
        "__getitem__", "select_idxs", "select", "concat", "union", "repeat", "chunk", "from_dict",
        "from_single_dict", "to_tensordict", "from_tensordict", "pop")),
)


class UnsupportedVerlError(RLHooksError):
    """The installed verl's code differs from every reviewed version (or verl is not installed)."""


def installed_verl_version() -> str | None:
    try:
        return metadata.version("verl")
    except metadata.PackageNotFoundError:
        return None


def in_tested_range(version: str) -> bool:
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        return SpecifierSet(TESTED, prereleases=True).contains(Version(version))
    except InvalidVersion:
        return False


def check_verl(version: str | None = None) -> str:
    """The installed verl version, when the verl code the shim relies on is a reviewed version's;
    UnsupportedVerlError (naming the changed members) otherwise, unless the user opted in."""
    import structlog

    log = structlog.get_logger("rlhooks.verl")
    version = version if version is not None else installed_verl_version()
    if version is None:
        raise UnsupportedVerlError(
            f"verl is not installed; rlhooks train needs verl (tested: {TESTED}): pip install -e '.[verl]' in the rlhooks clone"
        )
    same_as, nearest, changed = compare(fingerprints())
    if same_as:
        if not in_tested_range(version):
            log.warning(f"verl {version} is outside the tested range {TESTED}, but the verl code the rlhooks trainer "
                        f"relies on is the same as in verl {', '.join(same_as)} (fingerprints match): running",
                        verl=version)
        return version
    message = (
        f"verl {version}: the verl code the rlhooks trainer relies on differs from every reviewed verl "
        f"({', '.join(sorted(recorded())) or 'none recorded'}); changed since verl {nearest}: {', '.join(changed)}. "
        f"Install a reviewed verl (pip install -e '.[verl]' in the rlhooks clone), or set {ALLOW_ENV}=1 to run "
        f"this one at your own risk (`python -m rlhooks.engines.verl.compat` lists the changes)"
    )
    if os.environ.get(ALLOW_ENV, "").strip().lower() in ("1", "true", "yes"):
        log.warning(message, verl=version)
        return version
    raise UnsupportedVerlError(message)


def check_verl_version(version: str | None = None) -> str:
    """The name before the fingerprint policy: :func:`check_verl`."""
    return check_verl(version)


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


def compare(now: dict[str, str]) -> tuple[list[str], str | None, list[str]]:
    """(reviewed versions whose recorded hashes equal ``now``, the nearest reviewed version, the members
    that differ from it)."""
    records = recorded()
    same = sorted(v for v, known in records.items() if known == now)
    if same or not records:
        return same, (same[0] if same else None), ([] if same else sorted(now))
    diffs = {v: sorted(n for n in set(now) | set(known) if now.get(n) != known.get(n)) for v, known in records.items()}
    nearest = min(diffs, key=lambda v: (len(diffs[v]), v))
    return [], nearest, diffs[nearest]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlhooks.engines.verl.compat", description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true",
                        help="record the installed verl's fingerprints (after reviewing its changes)")
    args = parser.parse_args(argv)
    version = installed_verl_version()
    if version is None:
        print("verl is not installed")
        return 1
    if args.record:
        data = recorded()
        data[version] = fingerprints()
        FINGERPRINT_FILE.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"recorded the fingerprints of verl {version} in {FINGERPRINT_FILE.name}")
        return 0
    same_as, nearest, changed = compare(fingerprints())
    if same_as:
        print(f"verl {version}: the code the rlhooks trainer relies on matches reviewed verl {', '.join(same_as)}")
        return 0
    print(f"verl {version}: changed since reviewed verl {nearest}: {', '.join(changed)}; review the shim against it, "
          f"then run {RECORD_COMMAND}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
