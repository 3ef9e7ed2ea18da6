"""Which verl the shim runs on: the fingerprints of the verl code and config defaults it relies on decide,
not the version.

rlhooks runs on verl's V1 trainer (subclassing ``PPOTrainerSync``, the async trainers and verl's replay
buffers, overriding a few of their members) and on its legacy trainer (restating ``RayPPOTrainer.fit()``);
both call verl's workers, metric functions and ``DataProto``, and read verl's config defaults (e.g. what
``algorithm.filter_groups.metric`` means when unset). A verl release can break that without an API
change, and a release with a new number can leave all of it untouched. :func:`check_verl` fingerprints
each member the trainer in use relies on (:data:`SHARED_RELIED_ON` plus :data:`V1_RELIED_ON` or
:data:`V1_RELIED_ON`, a removable trainer's ``RELIED_ON``): a hash of its code read from verl's source with :mod:`ast` (:class:`SourceTree`;
comments, docstrings and formatting do not count), reads verl's defaults of :data:`CONFIG_DEFAULTS`, and
compares both with what was recorded per reviewed verl in ``verl_fingerprints.json`` (0.9.1, and verl's
main at a reviewed commit). ``rlhooks train`` checks once the config says which trainer runs (``--dry-run``
too), and each trainer's constructor checks its own:

* they match a reviewed verl: the run goes on (with a notice when the version is outside the tested
  range :data:`TESTED`, e.g. verl's main);
* they differ from every reviewed verl: one error naming the changed members, unless the user opts in
  with ``RLHOOKS_ALLOW_UNSUPPORTED_VERL=1`` (then a warning).

Only the trainer in use is checked, so a verl without the legacy trainer runs V1.
``python -m rlhooks.engines.verl.compat [--verl-source PATH]`` says what differs, by member, for the installed
verl or any verl tree; after reviewing a new verl (and porting its changes into the shim), ``--record``
records its fingerprints. This module imports nothing from verl, ever: it reads verl's files.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import ast
import json
import os
import sys
from importlib import metadata
from pathlib import Path

from rlhooks.core.errors import RLHooksError
from rlhooks.engines.verl import trainers

#: verl releases the shim was tested on in CI (pyproject's ``verl`` extra allows the next minor,
#: whose fingerprints decide at start-up)
TESTED = ">=0.9.1,<0.10"
SUPPORTED = TESTED  # the name before the fingerprint policy
ALLOW_ENV = "RLHOOKS_ALLOW_UNSUPPORTED_VERL"
FINGERPRINT_FILE = Path(__file__).with_name("verl_fingerprints.json")
RECORD_COMMAND = "python -m rlhooks.engines.verl.compat --record"

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
    # rlhooks train (main.py): verl's own config validation and entry point, called as verl's main_ppo calls them
    "verl.utils.config:validate_config",
    "verl.utils.device:auto_set_device",
    "verl.trainer.ppo.utils:need_critic",
    "verl.trainer.ppo.utils:need_reference_policy",
    "verl.trainer.main_ppo:run_ppo",  # called with task_runner_class (the rlhooks TaskRunner)
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
    _BUFFER + "_wait_for_next_poll",  # sleeps self.poll_interval, read at each poll (the rlhooks buffer adapts it)
    "verl.utils.import_utils:load_extern_object",  # checks.py loads a custom_sampler as verl's trainer will
    _BUFFER + "_dapo_filtered_keys",  # overridden: the rlhooks filters decide which groups are evicted
    _BUFFER + "_terminal_eviction_reasons",
    _BUFFER + "_evict_terminal_groups",
    _BUFFER + "_sync_metadata_from_transfer_queue",  # overridden: finished groups shown in waves (exact resume)
    _BUFFER + "_select_prompt_uids",  # overridden with uids in draw order: verl sorts by step, stably
    _BUFFER + "_materialize_batch",  # overridden with the snapshot in uid order: the trained batch's row order
    "verl.trainer.ppo.v1.agent_loop_tq:AgentLoopWorkerTQ._agent_loop_postprocess",  # the fields put into TQ
    # colocate_async (v1/async_trainers.py): verl's async lifecycle taken whole, its async buffer subclassed
    "verl.trainer.ppo.v1.trainer_colocate_async:PPOTrainerColocateAsync",
    # verl's: asks _stale_terminal_keys, then _dapo_filtered_keys (the filters keep out the stale groups)
    "verl.trainer.ppo.v1.replay_buffer:ReplayBufferAsync._terminal_eviction_reasons",
    "verl.trainer.ppo.v1.replay_buffer:ReplayBufferAsync._stale_terminal_keys",  # overridden: its result kept
    "verl.trainer.ppo.v1.replay_buffer:ReplayBufferAsync.wait_for_sampleable",
    "verl.trainer.ppo.v1.replay_buffer:ReplayBufferAsync.sample",
    # separate_async (v1/async_trainers.py): subclassed, on_init_end/on_step_end/on_sample_end re-bound, its
    # __init__ and _setup reached through the MRO, _setup's source read by check_hybrid_engine
    "verl.trainer.ppo.v1.trainer_separate_async:PPOTrainerSeparateAsync",
    # overridden lifecycle hooks (verl's extension points; the overrides call verl's first)
    _V1 + "on_step_begin",
    _V1 + "on_validate_end",
    # every prompt dispatch passes through the overridden _submit_batch_to_rollout, every fetch through the
    # overridden _fetch_one_gen_batch (its uids kept: _next_train_batch assigns none)
    _V1 + "_add_batch_to_generate",
    _V1 + "_add_prompts_to_generate",
    _V1 + "_next_train_batch",
    # where the trainer attributes rlhooks reads are set (ATTRIBUTES)
    _V1 + "_setup",
    _V1 + "_init_tokenizer",
    # called by the rlhooks buffer (attach) after setting the sizes verl gives only its built-in buffer
    _BUFFER + "_validate_mode_config",
    "verl.trainer.ppo.v1.replay_buffer:ReplayBufferAsync._validate_mode_config",
    "verl.trainer.ppo.v1.replay_buffer:DAPO_FILTERED_REWARD_COUNTS_KEY",  # the table rlhooks keeps out of its metrics
    # checkpoints (v1/trainer.py _save_checkpoint, restated): verl 0.9.1's callback, verl main's TransferQueue gate
    "verl.trainer.ppo.checkpoint_callback:build_checkpoint_callback",
    "verl.trainer.ppo.checkpoint_callback:CheckpointCallback.on_save",
    "verl.trainer.ppo.v1.trainer_base:_tq_supports_checkpoint",
    # what _PromptSource edits prompt batches with (_init_dataloader rebuilds verl's loader from the loader itself)
    "verl.trainer.ppo.utils:Role",
    *(f"verl.utils.tensordict_utils:{name}" for name in (
        "assign_non_tensor_data", "assign_non_tensor_stack", "concat_tensordict", "index_select_tensor_dict")),
)

#: verl code the CPU learner (engines/verl/cpu: verl on this machine's CPU, for tests and demos) edits or
#: overrides where verl has no public extension point: recorded and reported (``--verl-source``), checked by
#: the CPU learner's tests; not at a GPU run's start-up, which never loads it
CPU_LEARNER_RELIED_ON: tuple[str, ...] = (
    "verl.workers.rollout.base:_ROLLOUT_REGISTRY",  # the worker-side rollout by name (no public registration)
    "verl.workers.rollout.base:get_rollout_class",  # what reads it
    "verl.workers.rollout.replica:RolloutReplicaRegistry.register",
    "verl.plugin.platform.platform_manager:_current_platform",  # set back after a test (platform.installed)
    "verl.plugin.platform.platform_manager:set_platform",
    "verl.plugin.platform.platform_manager:PlatformRegistry.register",
    "verl.workers.engine.base:EngineRegistry._engines",  # read: verl asserts on a second registration
    "verl.workers.engine.base:EngineRegistry.register",
    "verl.workers.engine.fsdp.transformer_impl:FSDPEngineWithLMHead._build_fsdp_module",  # its CPUOffloadPolicy swapped
    "verl.checkpoint_engine:CheckpointEngineRegistry.register",
)

#: verl instance attributes the V1 classes read or edit -> the fingerprinted member that sets them (a test
#: checks that member assigns ``self.<attribute>``): a change of what they hold changes that member
ATTRIBUTES: dict[str, str] = {
    **{f"PPOTrainer.{a}": _V1 + "__init__" for a in (
        "config", "use_critic", "replay_buffer", "trainer_mode")},
    "PPOTrainer.checkpoint_callback": _V1 + "__init__",  # verl 0.9.1; main has none (read with getattr)
    "PPOTrainer.global_steps": _V1 + "fit",
    **{f"PPOTrainer.{a}": _V1 + "_init_dataloader" for a in (
        "train_dataset", "train_dataloader", "train_dataloader_it", "total_training_steps")},
    "PPOTrainer.tokenizer": _V1 + "_init_tokenizer",
    **{f"PPOTrainer.{a}": _V1 + "_setup" for a in ("actor_rollout_wg", "critic_wg")},
    # the key-status sets the buffer edits (waves), the verdict cache it reads and restores, the sizes it sets
    **{f"ReplayBuffer.{a}": _BUFFER + "__init__" for a in (
        "partitions", "pending_keys", "running_keys", "finished_keys", "failure_keys", "_dapo_classification_cache",
        "filter_groups_metric", "train_batch_size", "gen_batch_size", "max_inflight_gen_batches", "trainer_mode",
        "sync_refill_failed_groups",
        # the prompts in flight (their uids: the dispatched rows and sources kept until they leave)
        "prompt_global_steps",
        # the poll the rlhooks buffer adapts (its sleep between polls) and the custom sampler's own settings
        "poll_interval", "sampler_kwargs")},
}

#: members only some supported verl has (the rlhooks code reads them with getattr): recorded as ``missing``
#: where absent (0.9.1 has no TransferQueue gate, verl main no checkpoint callback)
VERSION_DEPENDENT = frozenset({
    "verl.trainer.ppo.v1.trainer_base:_tq_supports_checkpoint",
    "verl.trainer.ppo.checkpoint_callback:build_checkpoint_callback",
    "verl.trainer.ppo.checkpoint_callback:CheckpointCallback.on_save",
})
#: ... and the attributes of ATTRIBUTES only some supported verl sets (read with getattr)
VERSION_DEPENDENT_ATTRIBUTES = frozenset({"PPOTrainer.checkpoint_callback"})
#: verl's main reviewed, by commit (recorded with --verl-source on a checkout of it; see docs/how-to/verl.md)
MAIN_LABEL = "0.10.0.dev+1dda039"

#: every member fingerprinted (what --record writes)
#: the other trainers' packages (trainers.REMOVABLE: the legacy one), each listing what it relies on
_REMOVABLE = {name: trainers.removable(name) for name in trainers.REMOVABLE}
RELIED_ON: tuple[str, ...] = (SHARED_RELIED_ON + tuple(m for pkg in _REMOVABLE.values() for m in pkg.RELIED_ON)
                              + V1_RELIED_ON + CPU_LEARNER_RELIED_ON)
TRAINERS = {**{name: pkg.RELIED_ON for name, pkg in _REMOVABLE.items()}, "v1": V1_RELIED_ON,
            "cpu": CPU_LEARNER_RELIED_ON}

#: verl config defaults rlhooks relies on (its meaning of verl's keys reads them), per trainer; recorded
#: as ``config:<key>`` with their JSON value, checked like code
SHARED_CONFIG_DEFAULTS = ("algorithm.filter_groups.enable", "algorithm.filter_groups.max_num_gen_batches",
                          "data.gen_batch_size", "trainer.use_v1")
CONFIG_DEFAULTS = {
    **{name: SHARED_CONFIG_DEFAULTS + pkg.CONFIG_DEFAULTS for name, pkg in _REMOVABLE.items()},
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


class SourceTree:
    """The verl source under ``root`` (the folder holding the ``verl`` package), read with :mod:`ast`: a member
    is found without importing verl, so the installed verl and any checkout (verl's main) are fingerprinted
    the same way. Follows ``from x import y`` re-exports and base classes (a member a class inherits)."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)
        if not (self.root / "verl" / "__init__.py").is_file():
            raise UnsupportedVerlError(f"{self.root} holds no verl source tree (no verl/__init__.py there): pass "
                                       "the folder that holds the verl package (a verl checkout's root)")
        self._modules: dict[str, ast.Module | None] = {}

    @classmethod
    def installed(cls) -> SourceTree:
        """The installed verl's source (found without importing verl; parsed once per process)."""
        import importlib.util

        spec = importlib.util.find_spec("verl")
        if spec is None or not spec.submodule_search_locations:
            raise UnsupportedVerlError("verl is not installed")
        return _tree(str(Path(list(spec.submodule_search_locations)[0]).parent))

    def version(self) -> str:
        """verl's version file (verl/version/version), as its setup.py reads it."""
        path = self.root / "verl" / "version" / "version"
        return path.read_text().strip() if path.is_file() else "unknown"

    def module(self, name: str) -> ast.Module | None:
        if name not in self._modules:
            base = self.root.joinpath(*name.split("."))
            path = next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)
            self._modules[name] = ast.parse(path.read_text(), str(path)) if path else None
        return self._modules[name]

    def node(self, qualname: str) -> ast.AST:
        """The definition ``module:Name.member`` names; LookupError when this verl has none."""
        module, _, attr_path = qualname.partition(":")
        first, *rest = attr_path.split(".")
        found = self._top(module, first, 0)
        if found is None:
            raise LookupError(qualname)
        where, node = found
        for part in rest:
            member = self._member(where, node, part, 0) if isinstance(node, ast.ClassDef) else None
            if member is None:
                raise LookupError(qualname)
            where, node = member
        return node

    def _top(self, module: str, name: str, depth: int) -> tuple[str, ast.AST] | None:
        tree = self.module(module)
        if tree is None or depth > 8:
            return None
        found = None
        for stmt in _top_statements(tree.body):  # the last definition wins, as at import
            if _defines(stmt, name):
                found = (module, stmt)
            elif isinstance(stmt, ast.ImportFrom):
                for alias in stmt.names:
                    if (alias.asname or alias.name) == name or alias.name == "*":
                        source = _absolute(module, stmt, self._is_package(module))
                        sub = self._top(source, alias.name if alias.name != "*" else name, depth + 1)
                        if sub is not None:
                            found = sub
        return found

    def _member(self, module: str, cls: ast.ClassDef, name: str, depth: int) -> tuple[str, ast.AST] | None:
        for stmt in cls.body:
            if _defines(stmt, name):
                return module, stmt
        if depth > 8:
            return None
        for base in cls.bases:  # the first base that has it (verl's classes use single inheritance mostly)
            if isinstance(base, ast.Name):
                found = self._top(module, base.id, 0)
                if found is not None and isinstance(found[1], ast.ClassDef):
                    member = self._member(found[0], found[1], name, depth + 1)
                    if member is not None:
                        return member
        return None

    def _is_package(self, module: str) -> bool:
        return (self.root.joinpath(*module.split(".")) / "__init__.py").is_file()


@functools.lru_cache(maxsize=4)  # an installed verl does not change within a process
def _tree(root: str) -> SourceTree:
    return SourceTree(root)


def _top_statements(body: list[ast.stmt]):
    """Module-level statements, those under a top-level ``if``/``try`` included (optional imports)."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.If):
            yield from _top_statements(stmt.body + stmt.orelse)
        elif isinstance(stmt, ast.Try):
            yield from _top_statements(stmt.body + stmt.orelse + stmt.finalbody
                                       + [s for h in stmt.handlers for s in h.body])


def _defines(stmt: ast.stmt, name: str) -> bool:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return stmt.name == name
    if isinstance(stmt, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets)
    if isinstance(stmt, ast.AnnAssign):
        return isinstance(stmt.target, ast.Name) and stmt.target.id == name
    return False


def _absolute(module: str, stmt: ast.ImportFrom, is_package: bool) -> str:
    if not stmt.level:
        return stmt.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (stmt.level - 1)]
    return ".".join(base + ([stmt.module] if stmt.module else []))


def _canonical(node: object) -> str:
    """The code of an AST node without its comments, docstrings and formatting (bare string statements are
    dropped like docstrings): a text that is the same on every Python version rlhooks supports (fields
    that are empty or None, such as 3.12's ``type_params``, are left out; ``ast.dump`` differs across versions)."""
    if isinstance(node, ast.AST):
        fields = []
        for name in node._fields:
            value = getattr(node, name, None)
            if isinstance(value, list):
                value = [v for v in value if not _is_bare_string(v)]
            if value is None or value == []:
                continue
            fields.append(f"{name}={_canonical(value)}")
        return f"{type(node).__name__}({','.join(fields)})"
    if isinstance(node, list):
        return "[" + ",".join(_canonical(v) for v in node) + "]"
    return repr(node)


def _is_bare_string(stmt: object) -> bool:
    return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
            and isinstance(stmt.value.value, str))


def fingerprint_of(node: ast.AST) -> str:
    return hashlib.sha256(_canonical(node).encode()).hexdigest()[:16]


def relied_on(trainer: str | None = None) -> tuple[str, ...]:
    """The verl members checked for ``trainer`` ("v1", "legacy"; None: all)."""
    if trainer is None:
        return RELIED_ON
    if trainer not in TRAINERS:
        raise ValueError(f"unknown trainer {trainer!r}: one of {sorted(TRAINERS)}")
    return SHARED_RELIED_ON + TRAINERS[trainer]


def config_defaults(trainer: str | None = None, source: SourceTree | None = None) -> dict[str, str]:
    """``config:<key>`` -> the JSON of verl's own default (its ``ppo_trainer`` config composed by Hydra, as
    verl's main_ppo composes it) for each key rlhooks relies on; ``missing`` when verl has no such key.
    ``source``: that verl tree's config files (default: the installed verl's)."""
    source = source or SourceTree.installed()
    return dict(_config_defaults(trainer, str(source.root.resolve())))


@functools.lru_cache(maxsize=8)  # a verl tree's config files do not change within a process
def _config_defaults(trainer: str | None, root: str) -> tuple[tuple[str, str], ...]:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    keys = sorted(_config_keys(trainer))
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(str(Path(root, "verl", "trainer", "config")), version_base=None):
            cfg = compose(config_name="ppo_trainer")
    finally:
        GlobalHydra.instance().clear()
    out = {}
    for key in keys:
        node = OmegaConf.select(cfg, key, default="<missing>")
        value = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
        out[CONFIG_PREFIX + key] = "missing" if value == "<missing>" else json.dumps(value, sort_keys=True)
    return tuple(out.items())


def _config_keys(trainer: str | None) -> set[str]:
    return set(CONFIG_DEFAULTS.get(trainer, SHARED_CONFIG_DEFAULTS)) if trainer else {
        k for keys in CONFIG_DEFAULTS.values() for k in keys}


def _node(source: SourceTree, name: str) -> ast.AST:
    """The definition of a relied-on member in ``source`` (LookupError when that verl lacks it)."""
    return source.node(name)


def fingerprints(trainer: str | None = None, source: SourceTree | None = None) -> dict[str, str]:
    """The fingerprint of each member :func:`relied_on` names (``missing`` when verl no longer has it): a hash
    of its code without comments, docstrings and formatting (:func:`fingerprint_of`), so a comment-only
    change in verl does not count; and verl's defaults of the config keys rlhooks relies on
    (:func:`config_defaults`). ``source``: a verl tree (default: the installed verl, read without importing it)."""
    source = source or SourceTree.installed()
    out = {}
    for name in relied_on(trainer):
        try:
            out[name] = fingerprint_of(_node(source, name))
        except (LookupError, ImportError, OSError, SyntaxError):
            out[name] = "missing"
    try:
        if not (source.root / "verl" / "trainer" / "config" / "ppo_trainer.yaml").is_file():
            raise ImportError("no verl config in this tree")
        out.update(config_defaults(trainer, source))
    except ImportError:  # no Hydra, or a tree without verl's config: every key is missing
        out.update({CONFIG_PREFIX + k: "missing" for k in _config_keys(trainer)})
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


def differences(now: dict[str, str]) -> dict[str, list[str]]:
    """Reviewed verl version -> the members (and config keys) of ``now`` whose fingerprint differs from it."""
    return {v: sorted(n for n in now if now[n] != known.get(n, "not recorded")) for v, known in recorded().items()}


def report(now: dict[str, str], label: str, record_hint: str = RECORD_COMMAND) -> tuple[int, list[str]]:
    """(exit code, lines): which reviewed verl ``now`` matches, else what differs from the nearest one, by member."""
    same_as, nearest, changed = compare(now)
    if same_as:
        return 0, [f"verl {label}: the code the rlhooks trainers rely on matches reviewed verl {', '.join(same_as)}"]
    known = recorded().get(nearest or "", {})
    lines = [f"verl {label}: {len(changed)} of {len(now)} fingerprints differ from the nearest reviewed verl "
             f"{nearest} (" + ", ".join(f"{v}: {len(d)}" for v, d in sorted(differences(now).items())) + "):"]
    for name in changed:
        was, is_ = known.get(name, "not recorded"), now[name]
        what = ("missing in this verl" if is_ == "missing" else "not recorded" if was == "not recorded"
                else "added in this verl" if was == "missing" else "changed")
        if name.startswith(CONFIG_PREFIX):
            what = f"default {was} -> {is_}"
        lines.append(f"  {name}: {what}")
    lines.append(f"Review the rlhooks code that relies on each against this verl, then record it: {record_hint}")
    return 1, lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlhooks.engines.verl.compat", description=__doc__.splitlines()[0])
    parser.add_argument("--verl-source", metavar="PATH",
                        help="check this verl tree (a checkout's root, e.g. verl's main) instead of the installed verl")
    parser.add_argument("--record", action="store_true",
                        help="record the fingerprints (after reviewing that verl's changes)")
    parser.add_argument("--label", help="the name to record them under (default: verl's version)")
    args = parser.parse_args(argv)
    try:
        if args.verl_source:
            source = SourceTree(args.verl_source)
            version = source.version()
            label = f"{version} ({source.root})"
        else:
            version = installed_verl_version()
            if version is None:
                print("verl is not installed")
                return 1
            source, label = SourceTree.installed(), version
    except UnsupportedVerlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    now = fingerprints(source=source)
    if args.record:
        data = recorded()
        data[args.label or version] = now
        FINGERPRINT_FILE.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"recorded the fingerprints of verl {args.label or version} in {FINGERPRINT_FILE.name}")
        return 0
    hint = RECORD_COMMAND + (f" --verl-source {args.verl_source} --label VERSION+COMMIT" if args.verl_source else "")
    code, lines = report(now, label, hint)
    print("\n".join(lines))
    return code


if __name__ == "__main__":
    sys.exit(main())
