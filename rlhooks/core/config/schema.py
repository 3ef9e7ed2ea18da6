"""The run schema: the ``run:`` section with its validators, the sections, one component, the whole config."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal

import attrs
import yaml

from rlhooks.core.components import NoOptions, is_reward_function
from rlhooks.core.config.secrets import redact_secrets
from rlhooks.core.config.structure import _converter
from rlhooks.core.rundir import check_run_name

# -- the run section ------------------------------------------------------------------------


def _positive(_inst: Any, attr: attrs.Attribute, value: Any) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"must be > 0, got {value!r}")


def _unit_interval(_inst: Any, attr: attrs.Attribute, value: float) -> None:
    if not 0 < value <= 1:
        raise ValueError(f"must be in (0, 1], got {value!r}")


def _in_range(lo: int, hi: int) -> Any:
    """Sane bounds: a size or seed past them ends in a memory error or a library's crash later."""

    def check(_inst: Any, attr: attrs.Attribute, value: Any) -> None:
        if value is not None and not lo <= value <= hi:
            raise ValueError(f"must be between {lo:,} and {hi:,}, got {value!r}")

    return check


#: run.reward_timeout_s's default: generous (an LLM judge's batch), yet a hung function is named within minutes
DEFAULT_REWARD_TIMEOUT_S = 300.0


def _time_bound(_inst: Any, attr: attrs.Attribute, value: Any) -> None:
    from rlhooks.core.interrupt import check_time_bound

    problem = check_time_bound(value)
    if problem:
        raise ValueError(problem)


#: bounds of the run section (far beyond any real run; they stop typos like an extra 000 early)
MAX_SEED = 2**32 - 1
MAX_STEPS = 10**9
MAX_BATCH = 10**7
MAX_N = 65_536
MAX_TRAJECTORIES = 10**7


def _run_name(_inst: Any, attr: attrs.Attribute, value: Any) -> None:
    problem = check_run_name(value)
    if problem:
        raise ValueError(problem)


@attrs.frozen(kw_only=True)
class RunOptions:
    """The ``run:`` section: what every engine needs to drive a run."""

    #: the run directory's name under out_dir: one plain directory name (see core/rundir.py)
    name: str = attrs.field(default="rlhooks-run", validator=_run_name)
    seed: int = attrs.field(default=0, validator=_in_range(0, MAX_SEED))
    steps: int = attrs.field(default=100, validator=[_positive, _in_range(1, MAX_STEPS)])
    out_dir: str = "runs"
    #: prompts per training step (groups that survive the filters)
    train_batch_size: int = attrs.field(default=32, validator=[_positive, _in_range(1, MAX_BATCH)])
    #: prompts per generation batch; defaults to train_batch_size
    gen_batch_size: int | None = attrs.field(default=None, validator=[_positive, _in_range(1, MAX_BATCH)])
    #: responses per prompt (group size)
    n: int = attrs.field(default=8, validator=[_positive, _in_range(1, MAX_N)])
    #: generation batches allowed per step before giving up (0 or negative = unlimited, stored as 0,
    #: as the dynamic-sampling document and verl's filter_groups have it)
    max_num_gen_batches: int = attrs.field(default=10, converter=lambda v: max(v, 0) if isinstance(v, int) else v)
    #: at the limit: "raise" (the DAPO recipe's error) or "continue" with the groups kept so far
    on_gen_limit: Literal["raise", "continue"] = "raise"
    #: per-source metrics (source/<name>/...) whenever batches carry data_source: the engines add
    #: the ``source_metrics`` plugin unless ``rewards:`` lists it already; false turns it off
    source_metrics: bool = True
    #: import every installed plugin at start and fail on any broken one
    strict_plugins: bool = False
    #: log every hook call with its plugin and duration
    trace_hooks: bool = False
    #: the learning state's per-response metric: "auto" = acc when the batch has it, else reward
    learning_metric: str = "auto"
    #: a response passes (for the learning state's pass rate) when its metric is >= this
    learning_pass_threshold: float = 0.5
    #: weight of the newest group in the learning state's pass-rate EMA
    learning_ema_alpha: float = attrs.field(default=0.3, validator=_unit_interval)
    #: per update of policy lag, the factor on a stale group's EMA weight (asynchronous training:
    #: weight = learning_ema_alpha * learning_lag_discount ** lag; 1 = ignore lag, 0 = stale groups do not move it)
    learning_lag_discount: float = attrs.field(default=0.5, validator=[attrs.validators.ge(0), attrs.validators.le(1)])
    #: pre-generation stage: sampler batches drawn at most per generation batch to fill it with
    #: prompts the prompt filters keep (the rest is filled with skipped prompts)
    max_prompt_draws: int = attrs.field(default=8, validator=_positive)
    #: size of a step's 2nd, 3rd... generation batch: "fixed" = gen_batch_size; "adaptive" = the
    #: prompts still needed / the step's kept ratio so far * 1.25, at least gen_batch_size / 6 (GRESO's rule)
    gen_batch_sizing: Literal["fixed", "adaptive"] = "fixed"
    #: seconds one reward function call may take (a row; a whole batch for score_batch) before its rows score
    #: error_score and count in rewards/errors/<name>, with a warning naming it (0: no bound)
    reward_timeout_s: float = attrs.field(default=DEFAULT_REWARD_TIMEOUT_S, validator=_time_bound)

    def __attrs_post_init__(self) -> None:
        rows = self.effective_gen_batch_size * self.n
        if rows > MAX_TRAJECTORIES:
            raise ValueError(
                f"gen_batch_size x n = {rows:,} trajectories per generation batch is more than {MAX_TRAJECTORIES:,}; "
                f"lower run.gen_batch_size or run.n"
            )

    @property
    def effective_gen_batch_size(self) -> int:
        return self.gen_batch_size or self.train_batch_size


# -- one component ------------------------------------------------------------------------

#: config section -> (component kind, is a list)
SECTIONS: dict[str, tuple[str, bool]] = {
    "sampler": ("sampler", False),
    "filters": ("filter", True),
    "prompt_filters": ("prompt_filter", True),
    "rewards": ("reward", True),
    "samples": ("backend", True),
    "backends": ("backend", True),
    "plugins": ("plugin", True),
}
TOP_LEVEL = ("run", *SECTIONS)
#: the list sections, in the order components are built and registered
LIST_SECTIONS = ("filters", "prompt_filters", "rewards", "samples", "backends", "plugins")
COMMON_KEYS = ("name", "on_error")
REWARD_FN_KEYS = ("weight", "error_score")
#: the verl_extensions sampler format: class_name / class_path instead of name
LEGACY_SAMPLER_KEYS = ("class_name", "class_path")
LEGACY_SAMPLER_MODULES = ("verl_extensions.multi_source_sampler", "verl_extensions")


@attrs.frozen
class ComponentConfig:
    """One enabled component: which, where in the file, and its structured options."""

    kind: str
    name: str
    path: str  # key path in the config, e.g. "backends[1]"
    options: Any  # an instance of the component's Options class
    on_error: str
    obj: Any = attrs.field(eq=False, repr=False)  # the loaded entry-point object (class/function)
    distribution: str = "?"
    #: ``<distribution>:<name>`` of its entry point ("" for a verl-style class_path)
    qualified_name: str = ""
    #: the name as the config wrote it (bare or qualified): what ``resolved()`` prints back
    written_name: str = ""
    weight: float = 1.0  # reward functions only
    error_score: float = 0.0  # reward functions only
    raw: Mapping[str, Any] = attrs.field(factory=dict, eq=False, repr=False)

    @property
    def is_reward_function(self) -> bool:
        return self.kind == "reward" and is_reward_function(self.obj)

    def resolved(self) -> dict[str, Any]:
        """Name plus every option with its default filled in (for printing)."""
        out: dict[str, Any] = {"name": self.written_name or self.name}
        if not isinstance(self.options, NoOptions):
            out.update(_converter.unstructure(self.options))
        if self.is_reward_function:
            out.update(weight=self.weight, error_score=self.error_score)
        out["on_error"] = self.on_error
        return out


@attrs.frozen
class Config:
    run: RunOptions
    sampler: ComponentConfig | None = None
    filters: tuple[ComponentConfig, ...] = ()
    #: filters of the pre-generation stage: they drop sampled prompts before generation
    prompt_filters: tuple[ComponentConfig, ...] = ()
    rewards: tuple[ComponentConfig, ...] = ()
    samples: tuple[ComponentConfig, ...] = ()
    backends: tuple[ComponentConfig, ...] = ()
    plugins: tuple[ComponentConfig, ...] = ()
    #: engine-specific sections (e.g. ``simulate:``), structured by the engine's own class
    extra: Mapping[str, Any] = attrs.field(factory=dict)
    source: str | None = None
    raw: Mapping[str, Any] = attrs.field(factory=dict, eq=False, repr=False)

    def components(self) -> Iterator[ComponentConfig]:
        """Every component in config order (sampler, filters, rewards, samples, backends, plugins)."""
        if self.sampler is not None:
            yield self.sampler
        for section in LIST_SECTIONS:
            yield from getattr(self, section)

    def resolved(self, redact: bool = True) -> dict[str, Any]:
        """The whole config with defaults filled in; secrets redacted unless asked otherwise."""
        out: dict[str, Any] = {"run": _converter.unstructure(self.run)}
        out["sampler"] = self.sampler.resolved() if self.sampler else None
        for section in LIST_SECTIONS:
            out[section] = [c.resolved() for c in getattr(self, section)]
        for key, value in self.extra.items():
            out[key] = _converter.unstructure(value) if attrs.has(type(value)) else value
        return redact_secrets(out) if redact else out

    def to_yaml(self, redact: bool = True) -> str:
        return yaml.safe_dump(self.resolved(redact), sort_keys=False, allow_unicode=True)
