"""What ``rlhooks train`` checks in a composed verl config before Ray starts: the ``--dry-run`` and the real
start run the same checks (:func:`start_issues`, from ``main.validate_verl_config``), so a value verl's
workers would refuse minutes later inside Ray is one ConfigError naming the key and what to do.

Each rule restates what verl 0.9.1's own code asserts or reads (file named in the rule), or what the CPU
learner needs (``cpu.ray_learner.check_v1_config``):

* ``trainer.v1`` and its ``sampler`` are mappings, ``trainer_mode`` a name (:func:`v1_shape_issues`);
* ``trainer.v1.sampler.max_off_policy_threshold``: a whole number >= 1, or null for no limit;
  ``max_off_policy_strategy``: ``drop`` or ``wait`` (``ReplayBuffer.__init__``, v1/replay_buffer.py);
* ``trainer.v1.sampler.custom_sampler``: path and name together, the rlhooks replay buffer of the mode or a
  subclass of it that verl's ``load_extern_object`` loads (``PPOTrainer._build_replay_buffer``);
* ``algorithm.filter_groups.max_inflight_gen_batches``: a whole number >= 1 (``ReplayBuffer._validate_mode_config``);
* ``separate_async``: ``parameter_sync_step`` a whole number >= 1 and ``data.train_batch_size ==
  parameter_sync_step * actor.ppo_mini_batch_size``, a standalone rollout pool and a checkpoint engine other
  than ``naive`` (``PPOTrainerSeparateAsync.__init__``); on the CPU learner its own stricter settings;
* the batch sizes verl's workers split (:func:`batch_split_issues`);
* the checkpoint this run would resume is complete and this run's, and a fresh start splices no metrics
  (``checkpoints.start_problem``: the trainer's own resume plan).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlhooks.core.errors import ConfigIssue

#: verl's trainer modes whose trainers read trainer.v1.separate_async (rlhooks's name and verl's)
SEPARATE_ASYNC_MODES = ("separate_async", "rlhooks_separate_async")


def _select(cfg: Any, key: str, default: Any = None) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.select(cfg, key, default=default)


def _whole(value: Any) -> bool:
    """A whole number as verl's ``isinstance(value, int)`` reads it (a YAML ``true`` is not one)."""
    return isinstance(value, int) and not isinstance(value, bool)


def v1_shape_issues(cfg: Any) -> list[ConfigIssue]:
    """``trainer.v1`` as verl's V1 trainer reads it (``config.trainer.v1.trainer_mode``, ``.sampler.*``):
    mappings where verl reads keys, a name where it reads a mode."""
    from omegaconf import DictConfig

    v1 = _select(cfg, "trainer.v1")
    if not isinstance(v1, DictConfig):
        return [ConfigIssue("trainer.v1", f"is {v1!r}, not a mapping: verl's V1 trainer reads its settings under it "
                                          "(trainer.v1.trainer_mode, trainer.v1.sampler.*, ...); set a key under it, "
                                          "e.g. trainer.v1.trainer_mode=colocate_async, not trainer.v1 itself")]
    issues = []
    for key in ("sampler", "sync", "colocate_async", "separate_async"):
        node = v1.get(key)
        if node is not None and not isinstance(node, DictConfig):
            issues.append(ConfigIssue(f"trainer.v1.{key}", f"is {node!r}, not a mapping: set the keys under "
                                                           f"it (see verl's ppo_trainer.yaml), not trainer.v1.{key}"))
    mode = v1.get("trainer_mode")
    if not isinstance(mode, str):
        issues.append(ConfigIssue("trainer.v1.trainer_mode", f"is {mode!r}: name a trainer mode "
                                                             "(sync, colocate_async or separate_async)"))
    custom = _select(cfg, "trainer.v1.sampler.custom_sampler") if isinstance(v1.get("sampler"), DictConfig) else None
    if custom is not None and not isinstance(custom, DictConfig):
        issues.append(ConfigIssue("trainer.v1.sampler.custom_sampler", f"is {custom!r}, not a mapping: set "
                                  "trainer.v1.sampler.custom_sampler.path and .name, or leave it unset"))
    return issues


def _sampler_issues(cfg: Any) -> list[ConfigIssue]:
    threshold = _select(cfg, "trainer.v1.sampler.max_off_policy_threshold")
    issues = []
    if threshold is not None and not (_whole(threshold) and threshold >= 1):
        issues.append(ConfigIssue(
            "trainer.v1.sampler.max_off_policy_threshold",
            f"is {threshold!r}: verl's replay buffer takes the number of model versions a trajectory may span, a "
            f"whole number >= 1, or null for no limit (verl's default is 8); set e.g. "
            f"trainer.v1.sampler.max_off_policy_threshold=8"))
    strategy = _select(cfg, "trainer.v1.sampler.max_off_policy_strategy")
    if strategy not in ("drop", "wait"):
        issues.append(ConfigIssue("trainer.v1.sampler.max_off_policy_strategy",
                                  f"is {strategy!r}: verl's replay buffer takes 'drop' (verl's default) or 'wait'"))
    inflight = _select(cfg, "algorithm.filter_groups.max_inflight_gen_batches")
    if inflight is not None and not (_whole(inflight) and inflight >= 1):
        issues.append(ConfigIssue(
            "algorithm.filter_groups.max_inflight_gen_batches",
            f"is {inflight!r}: verl's replay buffer takes the number of prompt batches generating at once, a whole "
            f"number >= 1 (verl's default is 1); set e.g. algorithm.filter_groups.max_inflight_gen_batches=1"))
    return issues + _custom_sampler_issues(cfg)


def _custom_sampler_issues(cfg: Any) -> list[ConfigIssue]:
    """verl loads ``custom_sampler`` with ``load_extern_object(path, name)`` only when both are set (otherwise
    it builds its own buffer, which the rlhooks trainer refuses); the rlhooks trainers need the rlhooks buffer
    of their mode, or a subclass."""
    from rlhooks.engines.verl import v1

    custom = _select(cfg, "trainer.v1.sampler.custom_sampler") or {}
    path, name = custom.get("path"), custom.get("name")
    if not (path or name):
        return []
    mode = _select(cfg, "trainer.v1.trainer_mode")
    asynchronous = mode in v1.ASYNC_TRAINER_MODES.values()
    ours = ((v1.ASYNC_REPLAY_BUFFER_PATH, v1.ASYNC_REPLAY_BUFFER_NAME) if asynchronous
            else (v1.REPLAY_BUFFER_PATH, v1.REPLAY_BUFFER_NAME))
    key = "trainer.v1.sampler.custom_sampler"
    fix = (f"leave {key} unset and rlhooks train sets the rlhooks replay buffer (path={ours[0]}, name={ours[1]}), or "
           f"name a subclass of {ours[1]} as path=pkg://package.module or path=/path/to/file.py, with name=ClassName")
    if (path, name) == ours:
        return []
    if not (path and name):
        missing = "name" if path else "path"
        return [ConfigIssue(f"{key}.{missing}", f"is unset while {key}.{'path' if path else 'name'} is set: verl loads "
                                                f"a custom sampler only when both are set (else its own replay buffer, "
                                                f"which the rlhooks trainer cannot use); {fix}")]
    path = str(path)
    if not path.startswith("pkg://"):
        file = Path(path[len("file://"):] if path.startswith("file://") else path).expanduser()
        if not file.is_file() or file.suffix != ".py":
            what = "no such file" if not file.exists() else "not a Python file (.py)"
            return [ConfigIssue(f"{key}.path", f"is {path!r}: {what}; {fix}")]
    try:
        from verl.utils.import_utils import load_extern_object

        loaded = load_extern_object(path, str(name))
    except Exception as exc:  # noqa: BLE001 - any failure to import the user's module means the same
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        return [ConfigIssue(f"{key}.path", f"{path!r}, name {name!r} cannot be loaded as verl loads it ({reason}); "
                                           f"{fix}")]
    if asynchronous:
        from rlhooks.engines.verl.v1.async_trainers import RLHooksReplayBufferAsync as base
    else:
        from rlhooks.engines.verl.v1.replay_buffer import RLHooksReplayBuffer as base
    if not (isinstance(loaded, type) and issubclass(loaded, base)):
        return [ConfigIssue(key, f"is {name!r} from {path!r}, not a subclass of {base.__name__}, which the rlhooks "
                                 f"trainer mode {mode!r} needs (it runs the rlhooks filters); {fix}")]
    return []


def _separate_async_issues(cfg: Any, on_cpu: bool) -> list[ConfigIssue]:
    """verl's PPOTrainerSeparateAsync.__init__ asserts, and PPOTrainer.step's train_batch_size % parameter_sync_step."""
    key = "trainer.v1.separate_async.parameter_sync_step"
    sync_step = _select(cfg, key, default=1)
    issues = []
    if not (_whole(sync_step) and sync_step >= 1):
        if not on_cpu:  # the CPU learner's check names it (there it must be 1)
            issues.append(ConfigIssue(key, f"is {sync_step!r}: separate_async takes the number of local updates "
                                           f"between weight syncs, a whole number >= 1 (verl's default is 4)"))
    else:
        batch, mini = _select(cfg, "data.train_batch_size"), _select(cfg, "actor_rollout_ref.actor.ppo_mini_batch_size")
        if _whole(batch) and _whole(mini) and batch != sync_step * mini:
            issues.append(ConfigIssue(
                "actor_rollout_ref.actor.ppo_mini_batch_size",
                f"is {mini}, and verl's separate_async needs data.train_batch_size ({batch}) = {key} ({sync_step}) x "
                f"actor_rollout_ref.actor.ppo_mini_batch_size: set ppo_mini_batch_size={batch // sync_step}"
                + ("" if batch % sync_step == 0 else f" and a train_batch_size that {sync_step} divides")))
    if on_cpu:
        return issues  # the CPU learner's own checks (cpu.ray_learner) name its rollout pool and checkpoint engine
    rollout = cfg.actor_rollout_ref.rollout
    if not all(_whole(v) and v > 0 for v in (rollout.nnodes, rollout.n_gpus_per_node)):
        issues.append(ConfigIssue("actor_rollout_ref.rollout.nnodes", f"is {rollout.nnodes!r} (n_gpus_per_node "
                                  f"{rollout.n_gpus_per_node!r}): separate_async generates on a rollout pool of its "
                                  "own; set actor_rollout_ref.rollout.nnodes and n_gpus_per_node to its size (both > 0)"))
    if rollout.checkpoint_engine.backend == "naive":
        issues.append(ConfigIssue("actor_rollout_ref.rollout.checkpoint_engine.backend", "is 'naive': separate_async "
                                  "moves weights to its own rollout pool through another engine (nccl, nixl, ...)"))
    return issues


def batch_split_issues(cfg: Any) -> list[ConfigIssue]:
    """The sizes verl's engine workers split a step's data into (FSDP engine; verl 0.9.1's
    ``workers/engine/utils.py:prepare_micro_batches`` asserts "data size must be divisible by force_group_size *
    micro_batch_size_per_gpu", and ``engine_workers.train_mini_batch`` that each update's samples divide over the
    data-parallel ranks). Without dynamic batch sizes, per data-parallel rank (n_gpus / ulysses size):

    * an update: ``ppo_mini_batch_size x rollout.n / dp`` samples in micro-batches of ``ppo_micro_batch_size_per_gpu``;
    * the old and reference log-probs: a step's samples (V1: ``train_batch_size / parameter_sync_step x n``,
      padded up to a multiple of lcm(dp, ppo_mini_batch_size x n) as V1's ``_balance_batch`` does; legacy:
      ``train_batch_size x n``) / dp, in micro-batches of ``rollout.log_prob_micro_batch_size_per_gpu`` and
      ``ref.log_prob_micro_batch_size_per_gpu``.

    (force_group_size is 1 in verl's PPO path: no RL code sets it.) Other strategies (Megatron's data-parallel
    size depends on its model-parallel sizes) are left to verl's own checks."""
    from rlhooks.engines.verl.config import trainer_in_use

    ref = cfg.actor_rollout_ref
    actor, rollout = ref.actor, ref.rollout
    if actor.get("strategy") not in ("fsdp", "fsdp2"):
        return []
    n_gpus = _select(cfg, "trainer.n_gpus_per_node", 0) * _select(cfg, "trainer.nnodes", 0)
    sp = actor.get("ulysses_sequence_parallel_size", 1) or 1
    n, batch, mini = rollout.n, _select(cfg, "data.train_batch_size"), actor.ppo_mini_batch_size
    if not all(_whole(v) and v > 0 for v in (n_gpus, sp, n, batch, mini)) or n_gpus % sp:
        return []  # verl's validate_config names these
    dp = n_gpus // sp
    update = mini * n
    ranks = f"{dp} data-parallel rank{'s' if dp > 1 else ''}"
    issues = []
    if not actor.use_dynamic_bsz:
        if update % dp:
            issues.append(ConfigIssue("actor_rollout_ref.actor.ppo_mini_batch_size", f"is {mini}: an update has "
                                      f"ppo_mini_batch_size x actor_rollout_ref.rollout.n = {update} samples, which "
                                      f"verl's workers split evenly over the {ranks}: make it a multiple of {dp}"))
        else:
            issues += _micro_issue("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
                                   actor.ppo_micro_batch_size_per_gpu, update // dp, f"updates on ppo_mini_batch_size x n / {ranks} = {mini} x {n} / {dp}")
    sync_step = _select(cfg, "trainer.v1.separate_async.parameter_sync_step", 1)
    if _select(cfg, "trainer.v1.trainer_mode") not in SEPARATE_ASYNC_MODES:
        sync_step = 1
    if not (_whole(sync_step) and sync_step >= 1) or batch % sync_step or update % dp:
        return issues  # named by the separate_async and update checks
    samples = batch // sync_step * n
    how = f"data.train_batch_size x n / {ranks} = {batch} x {n} / {dp}"
    if sync_step > 1:
        how = f"data.train_batch_size / parameter_sync_step x n / {ranks} = {batch} / {sync_step} x {n} / {dp}"
    if trainer_in_use(cfg) == "v1":  # _balance_batch pads the step to a multiple of lcm(dp, update)
        multiple = math.lcm(dp, update)
        if samples % multiple:
            samples = -(-samples // multiple) * multiple
            how += f", padded to a multiple of {multiple} (lcm of the ranks and an update's samples)"
    elif samples % dp:
        return issues  # the legacy trainer's own _balance_batch names it
    bypass = _select(cfg, "algorithm.rollout_correction.bypass_mode", False)
    if not bypass and not rollout.get("log_prob_use_dynamic_bsz", False):
        issues += _micro_issue("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
                               rollout.get("log_prob_micro_batch_size_per_gpu"), samples // dp,
                               f"computes log-probs on {how}")
    from verl.trainer.ppo.utils import need_reference_policy

    if need_reference_policy(cfg) and not ref.ref.get("log_prob_use_dynamic_bsz", False):
        issues += _micro_issue("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
                               ref.ref.get("log_prob_micro_batch_size_per_gpu"), samples // dp,
                               f"computes the reference's log-probs on {how}")
    return issues


def _micro_issue(key: str, micro: Any, size: int, how: str) -> list[ConfigIssue]:
    if not (_whole(micro) and micro > 0) or size % micro == 0:
        return []  # unset or not a number: verl's validate_config names it
    fits = [d for d in range(1, size + 1) if size % d == 0][-4:]
    return [ConfigIssue(key, f"is {micro}, which does not divide {size}: each rank {how} = {size} samples at a time, "
                             f"in micro-batches of this size, and verl's workers assert it divides them ('data size "
                             f"must be divisible by force_group_size * micro_batch_size_per_gpu', inside Ray); set it "
                             f"to a divisor of {size} (e.g. {', '.join(map(str, fits))}) or change the batch sizes")]


def start_issues(cfg: Any) -> list[ConfigIssue]:
    """Every problem :mod:`this module <rlhooks.engines.verl.checks>` finds in a composed verl config (with its
    ``rlhooks:`` block), before Ray starts."""
    from rlhooks.engines.verl import checkpoints
    from rlhooks.engines.verl.config import rlhooks_config, trainer_in_use

    v1 = trainer_in_use(cfg) == "v1"
    on_cpu = cfg.trainer.get("device") == "cpu"
    issues: list[ConfigIssue] = []
    if v1:
        issues += v1_shape_issues(cfg)
        if issues:
            return issues  # the other checks read these keys
        issues += _sampler_issues(cfg)
        if _select(cfg, "trainer.v1.trainer_mode") in SEPARATE_ASYNC_MODES:
            issues += _separate_async_issues(cfg, on_cpu)
        if on_cpu:
            from rlhooks.engines.verl.cpu import ray_learner

            issues += ray_learner.v1_config_issues(cfg)
    issues += batch_split_issues(cfg)
    if on_cpu:  # the CPU learner's local policy and prompts (the real start checks them again, in runner.run)
        from rlhooks.engines.verl.cpu import runner

        issues += runner.local_file_issues(cfg)
    run = rlhooks_config(cfg).run
    problem = checkpoints.start_problem(cfg, Path(run.out_dir) / run.name)
    if problem:
        issues.append(ConfigIssue("trainer.default_local_dir", problem))
    return issues


def v1_ignored_keys(cfg: Any, raw: Mapping[str, Any]) -> list[str]:
    """The keys in the rlhooks config ``raw`` (as the user wrote it) and verl's config that verl's V1 trainer
    ignores: the legacy trainer's generation limit (``run.max_num_gen_batches``, ``run.on_gen_limit``, a dapo
    entry's ``max_num_gen_batches``, verl's ``algorithm.filter_groups.max_num_gen_batches`` > 0)."""
    run = raw.get("run") or {}
    keys = ("max_num_gen_batches", "on_gen_limit")
    found = [f"rlhooks.run.{k}" for k in keys if isinstance(run, Mapping) and k in run]
    filters = raw.get("filters") or []
    for i, entry in enumerate(filters if isinstance(filters, list) else []):
        if isinstance(entry, Mapping) and "max_num_gen_batches" in entry:
            found.append(f"rlhooks.filters[{i}].max_num_gen_batches")
    limit = _select(cfg, "algorithm.filter_groups.max_num_gen_batches")
    if _whole(limit) and limit > 0:
        found.append("algorithm.filter_groups.max_num_gen_batches")
    return found
