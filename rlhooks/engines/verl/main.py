"""Run verl's PPO/GRPO training with the rlhooks trainer.

    rlhooks train --config rlhooks.yaml [hydra overrides ...]
    python -m rlhooks.engines.verl.main [--config rlhooks.yaml] [hydra overrides ...]

The verl config is verl's own Hydra config (``ppo_trainer`` from ``verl.trainer.config``, or
``--verl-config-dir/--verl-config-name``) composed with the overrides. The rlhooks config is the
YAML file given with ``--config`` (its optional ``verl:`` section holds verl overrides, which the
command line overrides in turn) merged under the ``rlhooks:`` block of verl's config.
Overrides are routed by prefix:

* ``rlhooks.<key>=v`` (or ``+rlhooks.<key>=v``) edits the rlhooks config, e.g.
  ``rlhooks.run.max_num_gen_batches=4`` or ``rlhooks.filters[0].metric=score``;
* ``data.sampler.<key>=v``, the removed verl curriculum-sampler syntax, edits the rlhooks
  ``sampler:`` section (``data.sampler.class_name=MultiSourceSampler``);
* everything else goes to Hydra for verl.

The trainer is the one verl's config selects: V1 (``trainer.use_v1=true``, verl's default;
:mod:`rlhooks.engines.verl.v1`) or the legacy one (``trainer.use_v1=false``;
:mod:`rlhooks.engines.verl.legacy` through ``trainers.REMOVABLE``, imported only then). The rlhooks config is validated before Ray starts.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog

from rlhooks.core.config import apply_overrides, load_yaml
from rlhooks.core.errors import ConfigError, ConfigIssue, RLHooksError
from rlhooks.engines.verl import checks
from rlhooks.engines.verl.arguments import DEFAULT_CONFIG_NAME, add_arguments
from rlhooks.engines.verl.config import BLOCK, VERL_SECTION, deep_merge, raw_block, rlhooks_config, trainer_in_use
from rlhooks.engines.verl.ray_env import forward_rlhooks_env, warn_unshared_paths  # noqa: F401 (used by both runners, and by tests from here)

log = structlog.get_logger("rlhooks.verl")

VERL_CONFIG_MODULE = "verl.trainer.config"


# -- building the config ------------------------------------------------------------------------


def split_overrides(args: Iterable[str]) -> tuple[list[str], list[str], str | None]:
    """(verl Hydra overrides, rlhooks overrides, an ``rlhooks.config=`` path if given)."""
    verl: list[str] = []
    rl: list[str] = []
    path = None
    for arg in args:
        if "=" not in arg:
            raise ConfigError([ConfigIssue(arg, "an override must look like key.path=value")], "(command line)")
        key, _, value = arg.partition("=")
        bare = key.lstrip("+")
        if bare == f"{BLOCK}.config":
            path = value
        elif bare.startswith(f"{BLOCK}."):
            rl.append(f"{bare[len(BLOCK) + 1:]}={value}")
        elif bare.startswith("data.sampler."):
            rl.append(f"sampler.{bare[len('data.sampler.'):]}={value}")
        else:
            verl.append(arg)
    return verl, rl, path


def _hydra_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_hydra_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{_hydra_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    return text if text and all(c.isalnum() or c in "._-/:" for c in text) else "'" + text.replace("'", "\\'") + "'"


def verl_section_overrides(section: Any, source: str) -> list[str]:
    """The ``verl:`` section of rlhooks.yaml as Hydra overrides (a list, or a nested mapping)."""
    if section is None:
        return []
    if isinstance(section, list) and all(isinstance(s, str) for s in section):
        return list(section)
    if not isinstance(section, Mapping):
        raise ConfigError([ConfigIssue(VERL_SECTION, "expected a mapping of verl settings or a list of "
                                       "'key=value' overrides")], source)
    out: list[str] = []

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, Mapping) and node:
            for k, v in node.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            # a key written "+name" is one verl's config lacks: Hydra adds it with a leading "+"
            add = "+" if any(part.startswith("+") for part in prefix.split(".")) else ""
            out.append(f"{add}{prefix.replace('+', '')}={_hydra_value(node)}")

    walk("", section)
    return out


def compose_verl_config(overrides: Sequence[str], *, config_dir: str | None = None,
                        config_name: str = DEFAULT_CONFIG_NAME) -> Any:
    """verl's Hydra config with overrides (Hydra's compose API, as ``@hydra.main`` would build it)."""
    from hydra import compose, initialize_config_dir, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    init = (initialize_config_dir(config_dir=str(Path(config_dir).resolve()), version_base=None) if config_dir
            else initialize_config_module(VERL_CONFIG_MODULE, version_base=None))
    with init:
        return compose(config_name=config_name, overrides=list(overrides))


def config_source(path: str | None) -> str:
    """Where a verl config came from, as its errors say it."""
    return f"(from {path} and the command line)" if path else "(from the command line)"


_CANNOT_OVERRIDE = re.compile(r"Could not override '([^']+)'")


def compose_issue(exc: Exception, section: Sequence[str]) -> ConfigIssue:
    """What Hydra refused while composing verl's config, as one problem: a key verl's config lacks (named, with
    where it was set and the '+' that adds it), or Hydra's own message (a malformed override, a missing config
    group option). ``section``: the overrides from the YAML's ``verl:`` section."""
    text = str(exc).strip()
    cause = f" ({exc.__cause__})" if exc.__cause__ is not None and str(exc.__cause__).strip() else ""
    missing = _CANNOT_OVERRIDE.search(text)
    if missing and "+" in text.split("\n", 1)[-1]:  # Hydra's "To append to your config use +key=value"
        key = missing.group(1)
        in_yaml = any(o.split("=", 1)[0].lstrip("+~") == key for o in section)
        where = "the verl: section" if in_yaml else "the command line"
        how = f"'+{key.rsplit('.', 1)[-1]}:' in the verl: section" if in_yaml else f"+{key}=<value>"
        return ConfigIssue(f"{VERL_SECTION}.{key}", f"verl's config has no such key (set in {where}): check its "
                           f"spelling, or add it as a new key with a leading '+' ({how})")
    return ConfigIssue(VERL_SECTION, f"Hydra could not compose verl's config: {' '.join(text.split())}{cause}")


def build_config(rlhooks_yaml: str | None, args: Sequence[str], *, config_dir: str | None = None,
                 config_name: str = DEFAULT_CONFIG_NAME) -> Any:
    """The verl config with a validated ``rlhooks:`` block (plain data, so Ray ships it to workers)."""
    from omegaconf import OmegaConf, open_dict

    path = split_overrides(args)[2]
    rlhooks_yaml = path or rlhooks_yaml
    raw: dict[str, Any] = load_yaml(rlhooks_yaml) if rlhooks_yaml else {}
    section = verl_section_overrides(raw.pop(VERL_SECTION, None), str(rlhooks_yaml))
    verl_args, rl_args, _ = split_overrides([*section, *args])  # the command line comes last and wins
    from hydra.errors import HydraException

    try:
        cfg = compose_verl_config(verl_args, config_dir=config_dir, config_name=config_name)
    except HydraException as exc:  # one problem line, not Hydra's traceback
        raise ConfigError([compose_issue(exc, section)], config_source(rlhooks_yaml), kind="verl config") from None
    block = deep_merge(raw_block(cfg), raw)  # a block in the verl YAML itself, then the file
    block = apply_overrides(block, rl_args)
    with open_dict(cfg):
        cfg[BLOCK] = OmegaConf.create(block)
        if trainer_in_use(cfg) == "v1":
            shape = checks.v1_shape_issues(cfg)  # e.g. trainer.v1=5: before anything reads trainer.v1.*
            if shape:
                raise ConfigError(shape, "(from the verl config and the command line)", kind="verl config")
            select_v1_parts(cfg, verl_args)
            select_v1_rewards(cfg)
            if cfg.trainer.get("device") == "cpu" and cfg.trainer.v1.trainer_mode in checks.SEPARATE_ASYNC_MODES:
                from rlhooks.engines.verl.cpu.runner import select_separate_async_settings

                select_separate_async_settings(cfg, _chosen_keys(verl_args))
            from rlhooks.engines.verl.v1 import check_v1_settings

            check_v1_settings(cfg)  # verl V1 settings the rlhooks path refuses or carries over
    run = rlhooks_config(cfg).run  # every rlhooks config error now, before Ray and the models start
    with open_dict(cfg):
        select_checkpoint_dir(cfg, verl_args, run)
    if trainer_in_use(cfg) == "v1":
        ignored = checks.v1_ignored_keys(cfg, raw_block(cfg))
        if ignored:
            log.warning(f"{', '.join(ignored)}: the legacy trainer's limit on generation rounds, which verl's V1 "
                        "trainer ignores (its replay buffer refills evicted groups until the batch is full); "
                        "algorithm.filter_groups.max_inflight_gen_batches bounds how much generates at once. "
                        "Remove them, or run the legacy trainer with trainer.use_v1=false")
    return cfg


#: verl 0.9.1's trainer.default_local_dir (ppo_trainer.yaml), as written before interpolation
VERL_DEFAULT_LOCAL_DIR = "checkpoints/${trainer.project_name}/${trainer.experiment_name}"
#: a run's checkpoints, under its run directory (core/rundir.py), when verl's config names no other place
CHECKPOINTS_DIR = "checkpoints"


def select_checkpoint_dir(cfg: Any, verl_args: Sequence[str], run: Any) -> str | None:
    """``trainer.default_local_dir`` at verl's default (a directory per project and experiment, shared by every
    run of the same names) becomes the run's own: ``<run.out_dir>/<run.name>/checkpoints``, said in one line.
    One the user chose (command line, ``verl:`` section, a verl config of their own) is kept. Returns the
    directory set (None: kept)."""
    from omegaconf import OmegaConf

    if "trainer.default_local_dir" in _chosen_keys(verl_args):
        return None
    if OmegaConf.to_container(cfg.trainer, resolve=False).get("default_local_dir") != VERL_DEFAULT_LOCAL_DIR:
        return None
    path = str(Path(run.out_dir) / run.name / CHECKPOINTS_DIR)
    cfg.trainer.default_local_dir = path
    log.info(f"verl's checkpoints go to the run's directory: trainer.default_local_dir={path} "
             "(set trainer.default_local_dir to put them elsewhere)")
    return path


def _chosen_keys(verl_args: Sequence[str]) -> set[str]:
    return {arg.partition("=")[0].lstrip("+~") for arg in verl_args}


def select_v1_parts(cfg: Any, verl_args: Sequence[str]) -> dict[str, Any]:
    """On verl's V1 trainer, the rlhooks trainer mode and replay buffer, said in one warning.

    rlhooks runs on V1 through two of verl's extension points, both verl settings:
    ``trainer.v1.trainer_mode`` (the rlhooks trainers registered as ``rlhooks_sync``, ``rlhooks_colocate_async``
    and ``rlhooks_separate_async``: verl's trainers of those modes with the hooks) and
    ``trainer.v1.sampler.custom_sampler`` (the rlhooks replay buffer, which runs the filters).
    ``rlhooks train`` exists to run the hooks, so verl's own mode names (``sync``, verl's default, and the two
    asynchronous ones, as verl's docs and scripts write them) run as the rlhooks trainer of that mode; the
    replay buffer is set when the user named none. A mode rlhooks does not extend is a ConfigError.
    Returns what was set."""
    from rlhooks.engines.verl import v1

    chosen = _chosen_keys(verl_args)
    mode = cfg.trainer.v1.trainer_mode
    set_here: dict[str, Any] = {}
    said: list[str] = []
    verl_modes = {v1.BASE_TRAINER_MODE: v1.TRAINER_MODE, **v1.ASYNC_TRAINER_MODES}  # verl's name -> rlhooks's
    if mode in verl_modes:
        cfg.trainer.v1.trainer_mode = set_here["trainer.v1.trainer_mode"] = verl_modes[mode]
        if "trainer.v1.trainer_mode" in chosen or mode != v1.BASE_TRAINER_MODE:
            said.append(f"runs trainer.v1.trainer_mode={mode} as {verl_modes[mode]} (verl's {mode} trainer with "
                        f"the rlhooks hooks)")
            defaults = {}
        else:
            defaults = {"trainer.v1.trainer_mode": verl_modes[mode]}
    elif mode in verl_modes.values():
        defaults = {}
    else:
        raise ConfigError([ConfigIssue(
            "trainer.v1.trainer_mode",
            f"is {mode!r}: rlhooks train runs the rlhooks hooks on verl's V1 trainer in verl's modes "
            f"{', '.join(verl_modes)} (as {', '.join(verl_modes.values())}); {mode!r} is not one of them, so it "
            f"would train without them. Set one of those modes (or leave it unset for sync), or "
            f"trainer.use_v1=false for verl's legacy trainer",
        )], "(from the verl config and the command line)", kind="verl config")
    asynchronous = cfg.trainer.v1.trainer_mode in v1.ASYNC_TRAINER_MODES.values()  # v1/async_trainers.py
    custom = cfg.trainer.v1.sampler.get("custom_sampler") or {}
    if not (custom.get("path") or custom.get("name")):
        from omegaconf import OmegaConf

        buffer = ({"path": v1.ASYNC_REPLAY_BUFFER_PATH, "name": v1.ASYNC_REPLAY_BUFFER_NAME} if asynchronous
                  else {"path": v1.REPLAY_BUFFER_PATH, "name": v1.REPLAY_BUFFER_NAME})
        OmegaConf.update(cfg, "trainer.v1.sampler.custom_sampler", buffer, force_add=True)
        set_here["trainer.v1.sampler.custom_sampler"] = defaults["trainer.v1.sampler.custom_sampler"] = buffer
    if defaults:
        said.append("sets these verl keys, which were at verl's defaults: "
                    + ", ".join(f"{k}={v}" for k, v in defaults.items()))
    if said:
        log.warning(
            "rlhooks runs on verl's V1 trainer through verl's own extension points and " + "; and ".join(said)
            + " (see docs/how-to/verl.md, 'Choosing the trainer'; trainer.use_v1=false runs the legacy trainer)",
        )
    return set_here


def adapter_reward_kwargs(config: Any) -> dict[str, Any]:
    """The rlhooks adapter's ``reward_kwargs`` for the reward functions in the ``rlhooks.rewards:`` list
    (names, weights, error scores and options as a run with those entries scores them)."""
    from rlhooks.engines.verl.config import rlhooks_config

    fns = [c for c in rlhooks_config(config).components() if c.is_reward_function]
    if not fns:
        return {}
    kwargs: dict[str, Any] = {"functions": [c.name for c in fns], "weights": [float(c.weight) for c in fns]}
    if any(c.error_score for c in fns):
        kwargs["error_score"] = {c.name: float(c.error_score) for c in fns}
    options = {c.name: dict(c.raw) for c in fns if c.raw}
    if options:
        kwargs["options"] = options
    from rlhooks.core.config.schema import DEFAULT_REWARD_TIMEOUT_S

    timeout = rlhooks_config(config).run.reward_timeout_s
    if timeout != DEFAULT_REWARD_TIMEOUT_S:  # the adapter's default is the config's
        kwargs["timeout_s"] = float(timeout)
    return kwargs


def select_v1_rewards(cfg: Any) -> dict[str, Any]:
    """On verl's V1 trainer, the reward functions of ``rlhooks.rewards:`` as verl's reward-loop setting.

    V1 scores in verl's reward-loop workers, which run ``reward.custom_reward_function``: with that key at
    verl's default (no path) it is set to the rlhooks adapter with the functions, weights, error scores and
    options of ``rewards:`` (said in one warning). The adapter already named there with the same functions
    (or none) is kept; another custom function, or the adapter with other functions, is a ConfigError
    naming both keys. Returns what was set.
    """
    from omegaconf import OmegaConf

    from rlhooks.engines.verl.v1 import ADAPTER_MODULE, adapter_functions

    wanted = adapter_reward_kwargs(cfg)
    if not wanted:
        return {}
    names = wanted["functions"]
    custom = OmegaConf.select(cfg, "reward.custom_reward_function", default=None) or {}
    path = custom.get("path")
    if path:
        given = OmegaConf.select(cfg, "reward.custom_reward_function.reward_kwargs", default=None)
        ours = adapter_functions(cfg)
        if not ours:
            problem = (f"reward.custom_reward_function.path is {path!r} (name {custom.get('name')!r}), another "
                       "reward function than the rlhooks adapter")
        elif given is None or "functions" not in given:
            kwargs = {**wanted, **(OmegaConf.to_container(given) if given is not None else {})}
            OmegaConf.update(cfg, "reward.custom_reward_function.reward_kwargs", kwargs, force_add=True)
            log.warning("rlhooks.rewards names reward functions; verl's V1 trainer scores them in its reward-loop "
                        "workers through the rlhooks adapter that reward.custom_reward_function names, so its "
                        f"reward_kwargs (no functions set) are now {kwargs} (see docs/how-to/verl.md, "
                        "'Reward functions on V1')")
            return {"reward.custom_reward_function.reward_kwargs": kwargs}
        elif list(ours) == names:
            return {}
        else:
            problem = f"reward.custom_reward_function.reward_kwargs.functions is {list(ours)}"
        raise ConfigError([ConfigIssue(
            f"{BLOCK}.rewards",
            f"names the reward functions {names}, but {problem}: verl's V1 trainer scores with one of them. "
            f"Keep the functions under rewards: and remove reward.custom_reward_function from the verl "
            f"settings (rlhooks then sets it to its adapter), or move the functions from rewards: to "
            f"reward.custom_reward_function (see docs/how-to/verl.md, 'Reward functions on V1')",
        )], "verl config")
    setting = {"path": f"pkg://{ADAPTER_MODULE}", "name": "compute_score", "reward_kwargs": wanted}
    OmegaConf.update(cfg, "reward.custom_reward_function", setting, force_add=True)
    log.warning(
        "rlhooks.rewards names reward functions; verl's V1 trainer scores in its reward-loop workers, so "
        f"reward.custom_reward_function (at verl's default) is set to the rlhooks adapter: {setting} "
        "(see docs/how-to/verl.md, 'Reward functions on V1')",
    )
    return {"reward.custom_reward_function": setting}


# -- running ----------------------------------------------------------------------------------------


def validate_verl_config(cfg: Any, source: str | None = None) -> None:
    """verl's own ``validate_config``, as its main_ppo runs it before Ray starts, and rlhooks's checks of what
    verl's trainer and workers would refuse later inside Ray (:func:`checks.start_issues`): the ``--dry-run``
    and the real start run this one validation, and every problem found is in one ConfigError, not a traceback."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    auto_set_device(cfg)
    issues = checks.start_issues(cfg)
    try:
        validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    except (AssertionError, ValueError, KeyError, TypeError, OmegaConfBaseException, HydraException) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        issues.append(ConfigIssue(
            VERL_SECTION, f"verl's validate_config refused the verl config: {reason}. Set the verl keys it names "
            f"(under 'verl:' in the rlhooks YAML, or as key=value overrides on the command line)",
        ))
    if issues:
        raise ConfigError(issues, config_source(source), kind="verl config") from None


def cpu_learner(cfg: Any) -> bool:
    """``trainer.device=cpu``: the CPU learner (engines/verl/cpu: on V1 verl's run_ppo on a local Ray, on the
    legacy trainer verl's workers in this process).
    Its platform is installed here, before verl's auto_set_device would turn 'cpu' into 'cuda'."""
    if cfg.trainer.get("device") != "cpu":
        return False
    from rlhooks.engines.verl.cpu import platform

    platform.install()
    return True


def run(cfg: Any, session: Any = None, *, validated: bool = False) -> None:
    """verl's main_ppo for a composed config, with the rlhooks TaskRunner (or the CPU learner). ``session``: the
    driver's part of a run on a Ray TaskRunner (driver.DriverSession: signals forwarded to the TaskRunner).
    ``validated``: the caller ran :func:`validate_verl_config` (it reads the checkpoints: once is enough)."""
    def wrap(cls: Any) -> Any:
        return session.runner_class(cls) if session is not None else cls

    def call(fn: Callable[[], Any]) -> Any:
        return session.run(fn) if session is not None else fn()

    if cpu_learner(cfg):
        from rlhooks.engines.verl.cpu import runner

        if not validated:
            validate_verl_config(cfg)
        if trainer_in_use(cfg) == "v1":  # verl's run_ppo on a local Ray, with the rlhooks V1 TaskRunner
            from rlhooks.engines.verl.v1.runner import RLHooksTaskRunnerV1

            forward_rlhooks_env(cfg)
            call(lambda: runner.run(cfg, wrap(RLHooksTaskRunnerV1)))
        else:  # in this process: signals reach the trainer directly
            runner.run(cfg)
        return
    from verl.trainer.main_ppo import run_ppo

    if not validated:
        validate_verl_config(cfg)
    forward_rlhooks_env(cfg)
    if trainer_in_use(cfg) == "v1":
        from rlhooks.engines.verl.v1.runner import RLHooksTaskRunnerV1 as task_runner
    else:  # another trainer's package, imported only here: a verl without it runs V1
        from rlhooks.engines.verl import trainers

        task_runner = trainers.removable(trainer_in_use(cfg)).task_runner()
    call(lambda: run_ppo(cfg, task_runner_class=wrap(task_runner)))


def run_from_args(args: argparse.Namespace) -> int:
    from rlhooks.engines.verl.imports import collector_off

    # a start-up phase (engines/verl/imports.py): Hydra's config source, the fingerprints and the platform import
    # verl, and a run imports verl's main_ppo
    with collector_off():
        cfg = build_config(args.config, args.overrides, config_dir=args.verl_config_dir,
                           config_name=args.verl_config_name)
        from rlhooks.engines.verl.compat import check_verl

        check_verl(trainer=trainer_in_use(cfg))  # the verl code and defaults this trainer relies on are reviewed ones
        cpu_learner(cfg)
        if not args.dry_run:
            import verl.trainer.main_ppo  # noqa: F401 - what run() imports on V1 and for run_ppo
    if args.dry_run:
        validate_verl_config(cfg, args.config)  # --dry-run's verdict is the run's
        from omegaconf import OmegaConf

        print(OmegaConf.to_yaml({k: v for k, v in cfg.items() if k != BLOCK}))
        print("# rlhooks (resolved)")
        print(rlhooks_config(cfg).to_yaml())
        return 0
    from rlhooks.engines.verl import driver

    # the run's lock before Ray starts and before anything reads its checkpoint (the validation's resume plan
    # included): a second run of this name is refused as in use, not for what the first is writing; the
    # TaskRunner adopts it (driver.in_task_runner). Joining a Ray cluster with a relative run directory, that
    # directory is on the TaskRunner's node (run_output): it locks it there
    remote_run_dir = joined_ray_cluster(cfg) and not driver.run_dir_of(cfg).is_absolute()
    with contextlib.nullcontext() if remote_run_dir else driver.locked(cfg):
        validate_verl_config(cfg, args.config)
        metrics_file = run_metrics_file(cfg)
        start = metrics_file.stat().st_size if metrics_file.is_file() else 0
        with run_output(cfg, metrics_file, start, show_all=bool(getattr(args, "verbose", False))):
            try:
                run(cfg, driver.DriverSession(cfg, metrics_start=start, remote=bool(remote_run_dir)), validated=True)
            except Exception as exc:  # noqa: BLE001 - re-raised, unwrapped where Ray wrapped an rlhooks error
                cause = raised_in_ray(exc)
                if cause is not exc and isinstance(cause, RLHooksError):
                    raise cause from None  # its one-line message, not Ray's remote traceback
                failure = driver.explain_failure(exc, cfg)  # a full disk, a dead Ray process: one line
                if failure is not None:
                    raise failure from None
                raise
        return exit_code_of(run_outcome(metrics_file, start))


@contextlib.contextmanager
def run_output(cfg: Any, metrics_file: Path, start: int, *, show_all: bool = False) -> Iterator[None]:
    """What ``rlhooks train`` shows around the run (issue 38): config.yaml in the run directory first; verl's
    output into its verl.log with rlhooks's lines on the terminal (output.py; ``show_all``: everything);
    at the end, also after a failure, summary.json and the summary's lines (summary.py)."""
    import time

    from rlhooks.engines.verl import summary
    from rlhooks.engines.verl.output import verl_output

    run_dir = metrics_file.parent
    joined = joined_ray_cluster(cfg)
    if joined and not run_dir.is_absolute():
        # the TaskRunner resolves it where its node's `ray start` ran, not here: nothing of the run is here
        log.warning(f"{BLOCK}.run.out_dir is relative and rlhooks train joins the Ray cluster at {joined}: the run "
                    f"directory {run_dir} is written where the TaskRunner's node ran `ray start`, so this command "
                    f"writes no config.yaml, verl.log or summary there and leaves verl's output on the terminal")
        yield
        return
    try:
        summary.write_config(cfg, run_dir)
    except OSError as exc:
        log.warning(f"cannot write {run_dir / summary.CONFIG_FILE}: {exc.strerror or exc}")
    started = time.monotonic()
    failed = True
    ray_was_running = ray_connected()
    try:
        with verl_output(run_dir / summary.VERL_LOG, show_all=show_all):
            try:
                yield
            finally:
                if not ray_was_running:
                    stop_ray()
        failed = False
    finally:
        summary.finish(cfg, metrics_file, start=start, seconds=time.monotonic() - started,
                       trainer=trainer_in_use(cfg), failed=failed)


def ray_connected() -> bool:
    """Whether this process is connected to Ray (a caller's session, e.g. a test's shared Ray)."""
    ray = sys.modules.get("ray")
    return bool(ray is not None and ray.is_initialized())


def stop_ray() -> None:
    """Ray as the run connected this process to it (verl's run_ppo), stopped while verl's output still goes to
    verl.log: stopped later, at exit, the run's Ray processes log their own ends (an actor whose owner died, a
    reward call cut off: hundreds of traceback lines after an interrupted run) and Ray forwards them to the
    terminal."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        with contextlib.suppress(Exception):
            ray.shutdown()


def joined_ray_cluster(cfg: Any) -> str | None:
    """The address of the Ray cluster ``run_ppo`` joins (``RAY_ADDRESS``, ``ray_kwargs.ray_init.address``);
    None when it starts its own Ray here."""
    import os

    from omegaconf import OmegaConf

    return os.environ.get("RAY_ADDRESS") or OmegaConf.select(cfg, "ray_kwargs.ray_init.address", default=None) or None


def raised_in_ray(exc: BaseException) -> BaseException:
    """The exception a Ray task or actor raised (the TaskRunner's), when Ray wrapped it (RayTaskError,
    whose message is the remote traceback); ``exc`` otherwise."""
    try:
        from ray.exceptions import RayTaskError
    except ImportError:
        return exc
    for _ in range(8):  # nested tasks wrap once per level
        cause = getattr(exc, "cause", None)
        if not isinstance(exc, RayTaskError) or not isinstance(cause, BaseException):
            break
        exc = cause
    return exc


def run_metrics_file(cfg: Any) -> Path:
    """The run's metrics.jsonl (where the jsonl backend records the run's outcome, ``run_end``)."""
    from rlhooks.core.records import METRICS_FILE

    run_cfg = rlhooks_config(cfg).run
    return Path(run_cfg.out_dir) / run_cfg.name / METRICS_FILE


def run_outcome(metrics_file: Path, start: int = 0) -> str | None:
    """The status of the last ``run_end`` record written past byte ``start`` of ``metrics_file`` (the run
    that just ended; a resumed run appends to the file); None when there is none (no jsonl backend): the
    command then exits 0, as verl returned normally."""
    from rlhooks.core.records import records_past

    status = None
    for record in records_past(metrics_file, start):
        if record.get("kind") == "run_end":
            status = record.get("status")
    return status


def exit_code_of(status: str | None) -> int:
    """``rlhooks train``'s exit code: 0 success (or no recorded outcome), 3 stopped, 1 failed (core.run)."""
    from rlhooks.core.run import exit_code_of as code_of

    return 0 if status is None else code_of(status)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlhooks.engines.verl.main", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    from rlhooks.core import interrupt

    with interrupt.signals_interrupt():  # SIGTERM like Ctrl-C, as under `rlhooks train`
        try:
            return run_from_args(args)
        except RLHooksError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt as exc:
            print("rlhooks: interrupted; the run ended with status 'interrupted'", file=sys.stderr)
            return interrupt.exit_code(exc)


if __name__ == "__main__":
    sys.exit(main())
