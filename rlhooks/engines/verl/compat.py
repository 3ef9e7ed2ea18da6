"""Which verl the shim runs on: the fingerprints of the verl code and config defaults it relies on decide,
not the version.

rlhooks runs on verl's V1 trainer (subclassing ``PPOTrainerSync`` and verl's ``ReplayBuffer``, overriding
a few of their members) and on its legacy trainer (restating ``RayPPOTrainer.fit()``); both call verl's
workers, metric functions and ``DataProto``, and read verl's config defaults (e.g. what
``algorithm.filter_groups.metric`` means when unset). A verl release can break that without an API
change, and a release with a new number can leave all of it untouched. :func:`check_verl` hashes the
source of each member the trainer in use relies on (:data:`SHARED_RELIED_ON` plus :data:`V1_RELIED_ON`
or :data:`LEGACY_RELIED_ON`), reads verl's defaults of :data:`CONFIG_DEFAULTS`, and compares both with
what was recorded per reviewed verl version in ``verl_fingerprints.json``. ``rlhooks train`` checks once
the config says which trainer runs (``--dry-run`` too), and each trainer's constructor checks its own:

* they match a reviewed version: the run goes on (with a notice when the version is outside the
  tested range :data:`TESTED`, e.g. verl's main, whose code the shim relies on is 0.9.1's);
* they differ from every reviewed version: one error naming the changed members, unless the user
  opts in with ``RLHOOKS_ALLOW_UNSUPPORTED_VERL=1`` (then a warning).

Only the trainer in use is checked, so a verl without the legacy trainer runs V1. After reviewing a new
verl (and porting its changes into the shim), record its fingerprints with
``python -m rlhooks.engines.verl.compat --record``. This module imports nothing from verl at import time.
"""

from __future__ import annotations

import argparse
import functools
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
_V1 = "verl.trainer.ppo.v1.trainer_base:PPOTrainer."
_BUFFER = "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer."
_PROTO = "verl.protocol:DataProto."

#: verl code both trainers' rlhooks code relies on (adapter, state, metrics)
SHARED_RELIED_ON: tuple[str, ...] = (
    "verl.utils.checkpoint.checkpoint_manager:find_latest_ckpt_path",  # how verl picks the folder plan_resume checks
    "verl.trainer.ppo.metric_utils:compute_data_metrics",
    "verl.utils.metric:reduce_metrics",
    # the DataProto methods the shim and its adapter use (a copy-on-read DataProto is covered by
    # placing rewards by assignment; these catch a change of their rules)
    *(_PROTO + name for name in (
        "__getitem__", "select_idxs", "select", "concat", "union", "repeat", "chunk", "from_dict",
        "from_single_dict", "to_tensordict", "from_tensordict", "pop")),
)

#: verl code the legacy restatement (legacy/) restates (fit), calls or overrides; deleted with legacy/
LEGACY_RELIED_ON: tuple[str, ...] = (
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
    "verl.utils.checkpoint.checkpoint_manager:should_save_ckpt_esi",
    # the metric functions the shim calls
    *(f"verl.trainer.ppo.metric_utils:{name}" for name in (
        "compute_timing_metrics", "compute_throughout_metrics", "compute_variance_proxy_metrics")),
    "verl.utils.debug.metrics:calculate_debug_metrics",
    "verl.trainer.ppo.rollout_corr_helper:apply_bypass_mode",
    "verl.trainer.ppo.rollout_corr_helper:compute_rollout_correction_and_add_to_batch",
)

#: verl code the V1 trainer (v1/) subclasses, overrides or calls: not restated, but the lifecycle it hooks
#: into (where fit() calls _compute_metrics, what sample() does with _dapo_filtered_keys) is verl's
V1_RELIED_ON: tuple[str, ...] = (
    _V1 + "fit",  # the order: step -> _save_checkpoint -> on_step_end -> on_validate_end -> _compute_metrics
    # -> logger.log; the loop runs while global_steps <= total_training_steps (a plugin's stop lowers the latter)
    _V1 + "_validate",  # wrapped: its metrics for on_validation_end (verl's on_validate_end receives none)
    _V1 + "__init__",  # builds the replay buffer (custom_sampler) before init()
    _V1 + "_build_replay_buffer",  # the kwargs a custom sampler receives
    _V1 + "_init_dataloader",  # overridden: the rlhooks sampler and row index on verl's StatefulDataLoader
    _V1 + "_submit_batch_to_rollout",  # overridden: on_batch_sampled and prompt filters before the agent loop
    _V1 + "_fetch_one_gen_batch",  # the prompts' TensorDict (uid) the override receives
    _V1 + "_compute_metrics",  # overridden: on_step_end with verl's metrics, merged before logger.log
    _V1 + "_save_checkpoint",  # restated in checkpoints.CheckpointWriter.save, as for the legacy trainer
    _V1 + "_load_checkpoint",  # called after checkpoints.plan_resume, its errors turned into load_error
    _V1 + "_reissue_inflight_prompts",  # async modes: prompts in flight at a checkpoint bypass on_batch_sampled
    "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync",
    "verl.trainer.ppo.v1.trainer_base:register_trainer",
    "verl.trainer.main_ppo:TaskRunnerV1.run",
    _BUFFER + "__init__",
    _BUFFER + "sample",  # calls _terminal_eviction_reasons -> _dapo_filtered_keys; refills 2k per evicted group
    _BUFFER + "_dapo_filtered_keys",  # overridden: the rlhooks filters decide which groups are evicted
    _BUFFER + "_terminal_eviction_reasons",
    _BUFFER + "_evict_terminal_groups",
    _BUFFER + "_sync_metadata_from_transfer_queue",  # overridden: finished groups shown in waves (exact resume)
    _BUFFER + "_select_prompt_uids",  # overridden with uids in draw order: verl sorts by step, stably
    _BUFFER + "_materialize_batch",  # overridden with the snapshot in uid order: the trained batch's row order
    "verl.trainer.ppo.v1.agent_loop_tq:AgentLoopWorkerTQ._agent_loop_postprocess",  # the fields put into TQ
    # colocate_async (v1/async_trainers.py): verl's async lifecycle taken whole, its async buffer subclassed
    "verl.trainer.ppo.v1.trainer_colocate_async:PPOTrainerColocateAsync",
    "verl.trainer.ppo.v1.replay_buffer:ReplayBufferAsync._terminal_eviction_reasons",  # overridden: stale first
    "verl.trainer.ppo.v1.replay_buffer:ReplayBufferAsync._stale_terminal_keys",
    "verl.trainer.ppo.v1.replay_buffer:ReplayBufferAsync.wait_for_sampleable",
    "verl.trainer.ppo.v1.replay_buffer:ReplayBufferAsync.sample",
)

#: every member fingerprinted (what --record writes)
RELIED_ON: tuple[str, ...] = SHARED_RELIED_ON + LEGACY_RELIED_ON + V1_RELIED_ON
TRAINERS = {"legacy": LEGACY_RELIED_ON, "v1": V1_RELIED_ON}

#: verl config defaults rlhooks relies on (its meaning of verl's keys reads them), per trainer; recorded
#: as ``config:<key>`` with their JSON value, checked like code
SHARED_CONFIG_DEFAULTS = ("algorithm.filter_groups.enable", "algorithm.filter_groups.max_num_gen_batches",
                          "data.gen_batch_size", "trainer.use_v1")
CONFIG_DEFAULTS = {
    "legacy": SHARED_CONFIG_DEFAULTS + ("algorithm.filter_groups.metric",),
    "v1": SHARED_CONFIG_DEFAULTS + ("algorithm.filter_groups.metric", "trainer.v1.trainer_mode",
                                    "trainer.v1.sampler.custom_sampler", "trainer.v1.sampler.sync_refill_failed_groups"),
}
CONFIG_PREFIX = "config:"


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


def require_verl() -> str:
    """The installed verl version; UnsupportedVerlError when verl is not installed."""
    version = installed_verl_version()
    if version is None:
        raise UnsupportedVerlError(
            f"verl is not installed; rlhooks train needs verl (tested: {TESTED}): pip install -e '.[verl]' in the rlhooks clone"
        )
    return version


def check_verl(version: str | None = None, trainer: str | None = None) -> str:
    """The installed verl version, when the verl code (and config defaults) the shim relies on for
    ``trainer`` ("v1", "legacy"; None: both) are a reviewed version's; UnsupportedVerlError (naming the
    changed members) otherwise, unless the user opted in."""
    import structlog

    log = structlog.get_logger("rlhooks.verl")
    version = version if version is not None else require_verl()
    same_as, nearest, changed = compare(fingerprints(trainer))
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


def relied_on(trainer: str | None = None) -> tuple[str, ...]:
    """The verl members checked for ``trainer`` ("v1", "legacy"; None: all)."""
    if trainer is None:
        return RELIED_ON
    if trainer not in TRAINERS:
        raise ValueError(f"unknown trainer {trainer!r}: one of {sorted(TRAINERS)}")
    return SHARED_RELIED_ON + TRAINERS[trainer]


def config_defaults(trainer: str | None = None) -> dict[str, str]:
    """``config:<key>`` -> the JSON of verl's own default (its ``ppo_trainer`` config composed by Hydra, as
    verl's main_ppo composes it) for each key rlhooks relies on; ``missing`` when verl has no such key."""
    return dict(_config_defaults(trainer))


@functools.lru_cache(maxsize=4)  # the installed verl's config files do not change within a process
def _config_defaults(trainer: str | None) -> tuple[tuple[str, str], ...]:
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    keys = sorted(set(CONFIG_DEFAULTS[trainer]) if trainer else {k for v in CONFIG_DEFAULTS.values() for k in v})
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module("verl.trainer.config", version_base=None):
            cfg = compose(config_name="ppo_trainer")
    finally:
        GlobalHydra.instance().clear()
    out = {}
    for key in keys:
        node = OmegaConf.select(cfg, key, default="<missing>")
        value = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
        out[CONFIG_PREFIX + key] = "missing" if value == "<missing>" else json.dumps(value, sort_keys=True)
    return tuple(out.items())


def fingerprints(trainer: str | None = None) -> dict[str, str]:
    """sha256 of the source of each member :func:`relied_on` names (``missing`` when verl no longer has it),
    and verl's defaults of the config keys rlhooks relies on (:func:`config_defaults`)."""
    out = {}
    for name in relied_on(trainer):
        try:
            source = inspect.getsource(_resolve(name))  # type: ignore[arg-type]
        except (AttributeError, ImportError, OSError, TypeError):
            out[name] = "missing"
            continue
        out[name] = hashlib.sha256(source.encode()).hexdigest()[:16]
    try:
        out.update(config_defaults(trainer))
    except ImportError:
        out.update({CONFIG_PREFIX + k: "missing" for k in CONFIG_DEFAULTS.get(trainer, SHARED_CONFIG_DEFAULTS)})
    return out


def recorded() -> dict[str, dict[str, str]]:
    """verl version -> {member: hash}, as reviewed and recorded."""
    return json.loads(FINGERPRINT_FILE.read_text()) if FINGERPRINT_FILE.exists() else {}


def compare(now: dict[str, str]) -> tuple[list[str], str | None, list[str]]:
    """(reviewed versions whose recorded hashes equal ``now`` on ``now``'s members, the nearest reviewed
    version, the members that differ from it)."""
    # only what ``now`` covers: the check follows the trainer in use (a verl without the legacy trainer runs V1)
    records = {v: {n: known.get(n, "not recorded") for n in now} for v, known in recorded().items()}
    same = sorted(v for v, known in records.items() if known == now)
    if same or not records:
        return same, (same[0] if same else None), ([] if same else sorted(now))
    diffs = {v: sorted(n for n in now if now[n] != known[n]) for v, known in records.items()}
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
