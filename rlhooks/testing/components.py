"""Contracts per component kind: SamplerContract, FilterContract, RewardFunctionContract, BackendContract.

Each builds the component the way a run does: the author gives the object an entry point names
(``component``: the class or function) and the options a config would hold
(``component_options``: a dict, default ``{}``), and the kit structures the options into the
component's attrs ``Options`` class exactly as ``rlhooks.host.load_config`` does::

    class TestMyFilter(FilterContract):
        @pytest.fixture
        def component(self):
            return MyFilter

        @pytest.fixture
        def component_options(self):
            return {"metric": "acc"}

        @pytest.fixture
        def entry_point_name(self):  # optional: also check the installed entry point and YAML config
            return "my_filter"

Every component contract includes the hook contracts (HookPluginContract), for the hooks the
component implements.
"""

from __future__ import annotations

import inspect
import itertools
import math
import pickle
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import attrs
import numpy as np
import pytest

from rlhooks.core.batch import Batch
from rlhooks.core.components import (
    FilterDecision,
    instantiate,
    is_reward_function,
    make_reward_function,
    options_class,
    reward_component_problem,
)
from rlhooks.core.config import SECTIONS, _converter, load_config, structure_options
from rlhooks.core.data import DatasetColumns, declared_columns
from rlhooks.core.registry import Registry
from rlhooks.core.rewards import RewardEntry, RewardPipeline, resolve
from rlhooks.testing import checks
from rlhooks.testing.checks import PluginHarness, check_metrics_result, check_none_result, describe
from rlhooks.testing.contracts import ENTRY_POINT, BatchFactory, HookPluginContract, requires
from rlhooks.testing.factories import (
    ODD_STRINGS,
    batch_differences,
    make_dataset,
    make_prompt_batch,
    make_step_metrics,
    make_table_rows,
    make_trajectory_batch,
    make_validation_results,
)

#: component kind -> the config section that enables it
KIND_SECTION = {kind: section for section, (kind, _) in SECTIONS.items() if section != "samples"}


class ComponentContract(HookPluginContract):
    """Building a component from its options; optional entry-point and YAML checks."""

    requires_hooks: ClassVar[bool] = False

    @pytest.fixture
    def component(self) -> Any:
        """The class or function the plugin's entry point names; by default ``plugin_class``."""
        if self.plugin_class is not None:
            return self.plugin_class
        pytest.fail(
            f"{type(self).__name__} must set `plugin_class = <the class>` or provide a `component` fixture "
            f"returning the class or function the plugin's entry point names"
        )

    @pytest.fixture
    def component_options(self) -> dict[str, Any]:
        """Options as a config would give them (a YAML mapping without ``name``)."""
        return {}

    @pytest.fixture
    def options(self, component: Any, component_options: dict[str, Any]) -> Any:
        cls = options_class(component)
        if cls is None:
            assert not component_options, f"{describe(component)} declares no Options class but options were given"
            return None
        opts, issues = structure_options(cls, component_options, "options", describe(component))
        assert not issues, f"component_options do not structure into {describe(cls)}:\n  " + "\n  ".join(map(str, issues))
        return opts

    @pytest.fixture
    def plugin(self, component: Any, options: Any) -> Any:
        return instantiate(component, options) if options is not None else instantiate(component, None)

    @requires("Options")
    def test_options_class_is_frozen_attrs(self, component: Any, options: Any) -> None:
        """Options are an attrs class (cattrs structures it; unknown keys are config errors), frozen."""
        self._require_capability(component, "Options")
        cls = options_class(component)
        assert cls is not None, f"{describe(component)}.Options is not an attrs class; use @attrs.frozen(kw_only=True)"
        fields = attrs.fields(cls)
        if not fields:
            return
        try:
            setattr(options, fields[0].name, getattr(options, fields[0].name))
        except attrs.exceptions.FrozenInstanceError:
            return
        raise AssertionError(f"{describe(cls)} is mutable; declare it with @attrs.frozen(kw_only=True)")

    @requires("Options")
    def test_options_round_trip_through_config(self, component: Any, options: Any) -> None:
        """What ``rlhooks config check`` prints (options with defaults) must load back to the same options."""
        self._require_capability(component, "Options")
        cls = options_class(component)
        assert cls is not None, f"{describe(component)}.Options is not an attrs class; use @attrs.frozen(kw_only=True)"
        printed = _converter.unstructure(options)
        again, issues = structure_options(cls, printed, "options", describe(component))
        assert not issues, f"the printed options {printed!r} do not load back:\n  " + "\n  ".join(map(str, issues))
        assert again == options, f"options changed through print + load: {options!r} -> {again!r}"

    @requires(ENTRY_POINT)
    def test_entry_point_resolves(self, entry_point_name: str | None, component: Any, component_options: dict,
                                  component_kind: str) -> None:
        """The installed entry point names this component, and a YAML-style config enabling it validates."""
        if entry_point_name is None:
            pytest.skip("no entry_point_name fixture given")
        info = Registry().info(component_kind, entry_point_name)
        assert info.load() is component, f"entry point {info.where} loads {info.load()!r}, not {describe(component)}"
        section = KIND_SECTION[component_kind]
        item = {"name": entry_point_name, **component_options}
        cfg = load_config({section: item if section == "sampler" else [item]})
        # a bare or a qualified (<distribution>:<name>) name: the config resolves it as the registry does
        named = [c.qualified_name for c in cfg.components()]
        assert info.qualified in named, f"a config naming {entry_point_name!r} resolves to {named}, not {info.qualified}"


class _IndexStream:
    """Indices drawn from a sampler across epochs, the way a dataloader does."""

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler
        self._it: Iterator[int] | None = None

    def take(self, n: int) -> list[int]:
        out: list[int] = []
        empty_epochs = 0
        while len(out) < n:
            if self._it is None:
                self._it = iter(self.sampler)
            got = list(itertools.islice(self._it, n - len(out)))
            if len(got) < n - len(out):
                self._it = None
                empty_epochs = empty_epochs + 1 if not got else 0
                assert empty_epochs < 2, f"{describe(self.sampler)} yields no indices"
            out += [int(i) for i in got]
        return out


class SamplerContract(ComponentContract):
    """Samplers: valid indices, determinism per seed, exact resume from state (also after reward feedback)."""

    kind: ClassVar[str] = "sampler"

    @pytest.fixture
    def sampler_data(self, component: Any) -> DatasetColumns:
        """The dataset columns the sampler is built over (3 sources, with complexity, and the columns
        the sampler class declares in ``columns``: values in [0, 100), some rows NaN)."""
        return make_dataset(120, seed=0, columns=declared_columns(component))

    @pytest.fixture
    def batch_size(self) -> int:
        return 8

    @pytest.fixture
    def sampler_factory(self, component: Any, options: Any, sampler_data: DatasetColumns, batch_size: int) -> Callable[..., Any]:
        """``factory(seed=0, data=None) -> sampler``, built as the engine builds it."""

        def make(seed: int = 0, data: DatasetColumns | None = None) -> Any:
            opts = options if options is not None else getattr(component, "Options")()
            return component(opts, data if data is not None else sampler_data, batch_size=batch_size, seed=seed)

        return make

    @pytest.fixture
    def plugin(self, sampler_factory: Callable[..., Any]) -> Any:
        return sampler_factory()

    @pytest.fixture
    def prompt_batch_factory(self, sampler_data: DatasetColumns) -> BatchFactory:
        def make(n_prompts: int = 8, **kw: Any) -> Batch:
            return make_prompt_batch(n_prompts, dataset=sampler_data, **kw)

        return make

    @pytest.fixture
    def trajectory_batch_factory(self, sampler_data: DatasetColumns) -> BatchFactory:
        """Trajectories whose index/data_source agree with the sampler's dataset."""

        def make(n_groups: int = 4, group_size: int = 4, *, seed: int = 0, step: int = 1, generation: int = 1,
                 indices: Any = None, **kw: Any) -> Batch:
            prompts = make_prompt_batch(n_groups, dataset=sampler_data, indices=indices, seed=seed, step=step,
                                        generation=generation, lazy_text=False)
            return make_trajectory_batch(group_size=group_size, prompts=prompts, seed=seed, step=step,
                                         generation=generation, **kw)

        return make

    # -- helpers ---------------------------------------------------------------------------
    def _feedback(self, sampler: Any, stream: _IndexStream, batch_size: int, factory: BatchFactory, steps: int) -> None:
        """Draw a batch, report its rewards through on_rewards_computed (as a run does), repeat; a
        sampler with on_validation_end also gets validation results of the sources drawn, every 2 steps."""
        h = PluginHarness(sampler)
        validates = callable(getattr(sampler, "on_validation_end", None))
        try:
            for step in range(1, steps + 1):
                idx = stream.take(batch_size)
                batch = factory(len(idx), 4, seed=step, step=step, indices=idx, uniform_groups=2)
                check_metrics_result(h.call("on_rewards_computed", step=step, batch=batch), describe(sampler))
                if validates and step % 2 == 0:
                    metrics, per_source = make_validation_results(step, sources=tuple(map(str, np.unique(batch["data_source"]))))
                    check_metrics_result(h.call("on_validation_end", step=step, metrics=metrics, per_source=per_source),
                                         describe(sampler))
        finally:
            h.pm.unregister(name=checks.PLUGIN_NAME)

    @staticmethod
    def _reloaded(sampler_factory: Callable[..., Any], state: Any, seed: int) -> Any:
        # Through pickle, as a checkpoint would store it. The fresh sampler gets the same seed, as
        # an engine resuming a run builds it from the same config: a sampler need not store its seed.
        fresh = sampler_factory(seed=seed)
        fresh.load_state_dict(pickle.loads(pickle.dumps(state)))
        return fresh

    # -- checks ------------------------------------------------------------------------------
    def test_sampler_is_torch_sampler_with_state(self, plugin: Any) -> None:
        import torch.utils.data  # here, not at module level: the pytest plugin must not import torch

        assert isinstance(plugin, torch.utils.data.Sampler), f"{describe(plugin)} must subclass torch.utils.data.Sampler"
        for method in ("state_dict", "load_state_dict", "__iter__", "__len__"):
            assert callable(getattr(plugin, method, None)), f"{describe(plugin)} has no {method}()"
        n = len(plugin)
        assert isinstance(n, int) and n > 0, f"len({describe(plugin)}) must be a positive int, got {n!r}"

    def test_sampler_indices_are_valid(self, plugin: Any, sampler_data: DatasetColumns, batch_size: int) -> None:
        idx = np.asarray(_IndexStream(plugin).take(batch_size * 20))
        assert idx.min() >= 0 and idx.max() < len(sampler_data), (
            f"{describe(plugin)} drew indices outside [0, {len(sampler_data)}): {idx[(idx < 0) | (idx >= len(sampler_data))][:5]}"
        )

    def test_sampler_same_seed_same_indices(self, sampler_factory: Callable[..., Any], batch_size: int) -> None:
        a = _IndexStream(sampler_factory(seed=3)).take(batch_size * 4)
        b = _IndexStream(sampler_factory(seed=3)).take(batch_size * 4)
        assert a == b, "two samplers built with the same seed drew different indices"

    def test_sampler_state_round_trip_fresh(self, sampler_factory: Callable[..., Any], batch_size: int) -> None:
        s = sampler_factory(seed=1)
        state = s.state_dict()
        expected = _IndexStream(s).take(batch_size * 3)
        got = _IndexStream(self._reloaded(sampler_factory, state, seed=1)).take(batch_size * 3)
        assert got == expected, "a fresh sampler loaded with another's initial state_dict() draws different indices"

    def test_sampler_state_round_trip_mid_epoch(self, sampler_factory: Callable[..., Any], batch_size: int) -> None:
        """Resume inside an epoch: the loaded sampler continues where the saved one was."""
        s = sampler_factory(seed=2)
        stream = _IndexStream(s)
        stream.take(batch_size * 2 + 3)
        state = s.state_dict()
        expected = stream.take(batch_size * 3)
        got = _IndexStream(self._reloaded(sampler_factory, state, seed=2)).take(batch_size * 3)
        assert got == expected, (
            "after loading a mid-epoch state_dict(), the next indices differ from an uninterrupted run's; "
            "the state must include the position within the epoch (and the RNG)"
        )

    def test_sampler_state_round_trip_after_feedback(
        self, sampler_factory: Callable[..., Any], batch_size: int, trajectory_batch_factory: BatchFactory
    ) -> None:
        """Adaptive samplers: weights/levels learned from on_rewards_computed survive a checkpoint.

        The sampler is fed rewards past an epoch boundary before ``state_dict()``, and the fresh
        sampler's continuation is compared over more than an epoch: learned state that only shapes
        the next epoch's order (and a load that drops it) shows there, not within the current epoch."""
        s = sampler_factory(seed=4)
        epoch = len(s)
        stream = _IndexStream(s)
        self._feedback(s, stream, batch_size, trajectory_batch_factory, steps=-(-epoch // batch_size) + 2)
        state = s.state_dict()
        expected = stream.take(epoch + 2 * batch_size)
        got = _IndexStream(self._reloaded(sampler_factory, state, seed=4)).take(epoch + 2 * batch_size)
        first = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), None)
        assert first is None, (
            f"after reward feedback across an epoch boundary, a sampler loaded from state_dict() draws different "
            f"indices from the original's (first at position {first} of the continuation, epoch length {epoch}): "
            f"state_dict() must hold everything learned from on_rewards_computed (weights, levels, statistics) and "
            f"load_state_dict() must restore it all"
        )

    def test_sampler_state_dict_is_a_snapshot(self, sampler_factory: Callable[..., Any], batch_size: int,
                                              trajectory_batch_factory: BatchFactory) -> None:
        """state_dict() must not share live objects with the sampler: drawing on must not change it.
        Each condition has its own message: a state that changed, or a reload that draws otherwise."""
        s = sampler_factory(seed=5)
        stream = _IndexStream(s)
        stream.take(batch_size)
        state = s.state_dict()
        frozen = pickle.dumps(state)
        expected = stream.take(batch_size * 2)
        self._feedback(s, stream, batch_size, trajectory_batch_factory, steps=2)
        assert pickle.dumps(state) == frozen, (
            "state_dict() returned live references that changed as the sampler went on; return copies"
        )
        got = _IndexStream(self._reloaded(sampler_factory, state, seed=5)).take(batch_size * 2)
        assert got == expected, (
            "a fresh sampler loaded with a saved state_dict() does not continue where the saved one was "
            "(the state did not change afterwards: load_state_dict() does not restore it)"
        )

    @pytest.fixture
    def single_source_data(self, sampler_data: DatasetColumns) -> DatasetColumns:
        """A dataset whose rows all come from one source (the first of ``sampler_data``'s)."""
        return make_dataset(30, sources=(sampler_data.source_names[0],), seed=1, columns=tuple(sampler_data.extra))

    def test_sampler_single_source_dataset(self, sampler_factory: Callable[..., Any], batch_size: int,
                                           single_source_data: DatasetColumns) -> None:
        data = single_source_data
        idx = _IndexStream(sampler_factory(data=data)).take(batch_size * 2)
        assert all(0 <= i < len(data) for i in idx)


def _as_mask(decision: Any, n: int, where: str) -> tuple[np.ndarray, Mapping[str, Any]]:
    if isinstance(decision, FilterDecision):
        mask, metrics = np.asarray(decision.keep), decision.metrics
    else:
        mask, metrics = np.asarray(decision), {}
    assert mask.dtype == bool and mask.shape == (n,), (
        f"{where}: select() must return a bool mask of shape ({n},) or a FilterDecision, got {mask.dtype} {mask.shape}"
    )
    check_metrics_result(dict(metrics), f"{where}: FilterDecision.metrics")
    return mask, metrics


def _checked_select(plugin: Any, factory: Callable[[], Batch], what: str) -> tuple[np.ndarray, Batch, str]:
    """``plugin.select`` on a fresh batch from ``factory``: (its bool mask, an untouched twin, where);
    fails when the result is not a mask of the right shape or the batch was mutated."""
    batch, reference = factory(), factory()
    where = f"{describe(plugin)}.select"
    with checks.refusing_batch_writes(where):
        decision = plugin.select(batch)
    mask, _ = _as_mask(decision, len(reference), where)
    problems = batch_differences(reference, batch)
    assert not problems, f"{where} mutated its {what}:\n  " + "\n  ".join(problems)
    return mask, reference, where


class FilterContract(ComponentContract):
    """Filters: group-consistent bool masks, read-only batches, empty/single/single-response inputs, determinism."""

    kind: ClassVar[str] = "filter"

    def _select(self, plugin: Any, factory: Callable[[], Batch]) -> np.ndarray:
        mask, reference, where = _checked_select(plugin, factory, "batch")
        if len(reference):
            g = reference.groups
            kept = g.sum(mask)
            partial = np.flatnonzero((kept > 0) & (kept < g.sizes))
            assert not len(partial), (
                f"{where} kept only part of group(s) {g.keys[partial][:5].tolist()}; keep or drop whole groups"
            )
        return mask

    def test_filter_has_select(self, plugin: Any) -> None:
        assert callable(getattr(plugin, "select", None)), f"{describe(plugin)} has no select(batch) method"

    def test_filter_returns_group_consistent_mask(self, plugin: Any, trajectory_batch_factory: BatchFactory) -> None:
        for seed in range(4):
            self._select(plugin, lambda: trajectory_batch_factory(12, 4, seed=seed, uniform_groups=4))

    def test_filter_empty_batch(self, plugin: Any, trajectory_batch_factory: BatchFactory) -> None:
        self._select(plugin, lambda: trajectory_batch_factory(0, 4, seed=1))

    def test_filter_single_row(self, plugin: Any, trajectory_batch_factory: BatchFactory) -> None:
        self._select(plugin, lambda: trajectory_batch_factory(1, 1, seed=2))

    def test_filter_single_response_groups(self, plugin: Any, trajectory_batch_factory: BatchFactory) -> None:
        self._select(plugin, lambda: trajectory_batch_factory(8, 1, seed=3))

    def test_filter_is_deterministic(self, plugin: Any, trajectory_batch_factory: BatchFactory) -> None:
        a = self._select(plugin, lambda: trajectory_batch_factory(10, 4, seed=7, uniform_groups=3))
        b = self._select(plugin, lambda: trajectory_batch_factory(10, 4, seed=7, uniform_groups=3))
        assert np.array_equal(a, b), "select() gave different masks for identical batches"

    @pytest.fixture
    def filter_cases(self, trajectory_batch_factory: BatchFactory) -> dict[str, Callable[[], Batch]]:
        """Named batch factories that should drive the filter's drop path (each call returns a fresh,
        identical batch); by default ``default_filter_cases``. Extend with your own, as ``reward_cases``."""
        return default_filter_cases(trajectory_batch_factory)

    def test_filter_cases_keep_the_batch_intact(self, plugin: Any, filter_cases: dict[str, Callable[[], Batch]]) -> None:
        """Groups of identical responses, identical rewards and singletons (and your cases): a group
        consistent mask, no write into the batch on any path, including the one that drops."""
        assert filter_cases, "filter_cases is empty; return at least one named batch factory"
        for name, factory in filter_cases.items():
            try:
                a = self._select(plugin, factory)
                b = self._select(plugin, factory)
            except AssertionError as exc:
                raise AssertionError(f"filter case {name!r}: {exc}") from None
            except Exception as exc:  # noqa: BLE001 - name the case; the chained traceback shows where
                raise AssertionError(f"filter case {name!r}: select() raised {type(exc).__name__}: {exc}") from exc
            assert np.array_equal(a, b), f"filter case {name!r}: select() gave different masks for identical batches"


def default_filter_cases(factory: BatchFactory) -> dict[str, Callable[[], Batch]]:
    """The FilterContract's cases: groups a filter typically drops, mixed with ordinary ones."""

    def singletons_among_groups() -> Batch:
        return Batch.concat([factory(4, 4, seed=12, generation=1), factory(5, 1, seed=13, generation=2)])

    return {
        "identical responses": lambda: factory(8, 4, seed=10, uniform_groups=1, identical_responses=4),
        "identical rewards": lambda: factory(8, 4, seed=11, uniform_groups=1, identical_rewards=4),
        "singletons among groups": singletons_among_groups,
        "only identical responses": lambda: factory(3, 4, seed=14, uniform_groups=0, identical_responses=3),
    }


class PromptFilterContract(ComponentContract):
    """Prompt filters (section ``prompt_filters:``): bool masks over sampled prompts that carry the
    run's learning state as ``learning/*`` columns; read-only; empty/single inputs; deterministic
    for the same batch and state."""

    kind: ClassVar[str] = "prompt_filter"

    @pytest.fixture
    def sampler_data(self) -> DatasetColumns:
        return make_dataset(120, seed=0)

    @pytest.fixture
    def learning_state(self, sampler_data: DatasetColumns) -> Any:
        """A learning state fed a few steps of groups (some all-correct, some all-wrong, repeatedly)."""
        from rlhooks.core.learning import LearningState

        state = LearningState(len(sampler_data), source_codes=sampler_data.source_codes,
                              source_names=sampler_data.source_names)
        for step in range(1, 5):
            prompts = make_prompt_batch(24, dataset=sampler_data, indices=np.arange(24) * 5 % len(sampler_data),
                                        seed=step, step=step, lazy_text=False)
            state.update(make_trajectory_batch(group_size=4, prompts=prompts, seed=step, step=step, uniform_groups=12), step)
        return state

    @pytest.fixture
    def prompt_filter_batch(self, sampler_data: DatasetColumns, learning_state: Any) -> BatchFactory:
        """``factory(n_prompts, seed=0, step=5)``: a prompt batch with the learning state's columns."""

        def make(n_prompts: int = 16, *, seed: int = 0, step: int = 5) -> Batch:
            idx = np.random.default_rng(seed).integers(0, len(sampler_data), n_prompts).astype(np.int64)
            b = make_prompt_batch(n_prompts, dataset=sampler_data, indices=idx, seed=seed, step=step, lazy_text=False)
            return b.with_columns(**learning_state.columns(idx)).with_meta(step=step, generation=1, draw=1)

        return make

    def _select(self, plugin: Any, factory: Callable[[], Batch]) -> np.ndarray:
        return _checked_select(plugin, factory, "prompt batch")[0]

    def test_prompt_filter_has_select(self, plugin: Any) -> None:
        assert callable(getattr(plugin, "select", None)), f"{describe(plugin)} has no select(batch) method"

    def test_prompt_filter_returns_a_mask(self, plugin: Any, prompt_filter_batch: BatchFactory) -> None:
        for seed in range(4):
            self._select(plugin, lambda seed=seed: prompt_filter_batch(32, seed=seed))

    def test_prompt_filter_empty_batch(self, plugin: Any, prompt_filter_batch: BatchFactory) -> None:
        self._select(plugin, lambda: prompt_filter_batch(0))

    def test_prompt_filter_single_prompt(self, plugin: Any, prompt_filter_batch: BatchFactory) -> None:
        self._select(plugin, lambda: prompt_filter_batch(1, seed=2))

    def test_prompt_filter_is_deterministic(self, component: Any, options: Any, prompt_filter_batch: BatchFactory) -> None:
        """Two fresh instances judge the same batch (same learning state, step, draw) alike."""
        a = self._select(instantiate(component, options), lambda: prompt_filter_batch(48, seed=7))
        b = self._select(instantiate(component, options), lambda: prompt_filter_batch(48, seed=7))
        assert np.array_equal(a, b), "select() gave different masks for identical prompt batches"

    @requires("state_dict")
    def test_prompt_filter_state_round_trip_after_feedback(self, component: Any, options: Any,
                                                           sampler_data: DatasetColumns,
                                                           prompt_filter_batch: BatchFactory) -> None:
        """A stateful prompt filter fed a few steps (judge prompts, see their rewards, end the step),
        saved with state_dict() and loaded into a fresh instance through pickle (as a checkpoint),
        judges the next steps' prompts and adjusts exactly like the uninterrupted one."""
        uninterrupted = instantiate(component, options)
        self._require_capability(uninterrupted, "state_dict")

        def steps(plugin: Any, numbers: range) -> list[np.ndarray]:
            h = PluginHarness(plugin)
            masks = []
            try:
                for step in numbers:
                    masks.append(self._select(plugin, lambda step=step: prompt_filter_batch(48, seed=step, step=step)))
                    prompts = make_prompt_batch(24, dataset=sampler_data, indices=np.arange(24) * 5 % len(sampler_data),
                                                seed=step, step=step, lazy_text=False)
                    trajectories = make_trajectory_batch(group_size=4, prompts=prompts, seed=step, step=step,
                                                         uniform_groups=6 + step % 12)
                    check_metrics_result(h.call("on_rewards_computed", step=step, batch=trajectories), describe(plugin))
                    check_metrics_result(h.call("on_step_end", step=step, batch=trajectories, metrics={}), describe(plugin))
            finally:
                h.pm.unregister(name=checks.PLUGIN_NAME)
            return masks

        steps(uninterrupted, range(1, 5))
        state = uninterrupted.state_dict()
        resumed = instantiate(component, options)
        resumed.load_state_dict(pickle.loads(pickle.dumps(state)))
        expected, got = steps(uninterrupted, range(5, 9)), steps(resumed, range(5, 9))
        assert all(np.array_equal(a, b) for a, b in zip(expected, got)), (
            f"{describe(resumed)} loaded from state_dict() judges later prompts differently from the uninterrupted one"
        )
        assert pickle.dumps(resumed.state_dict()) == pickle.dumps(uninterrupted.state_dict()), (
            f"{describe(resumed)}: after the same later steps, the resumed filter's state_dict() differs"
        )


#: (response, target) pairs a reward function sees in practice
TYPICAL_REWARD_CASES: tuple[tuple[str, str], ...] = (
    ("The answer is \\boxed{42}.", "42"),
    ("<think>6*7</think>\n<answer>42</answer>", "42"),
    ("I think it's 41", "42"),
    ("#### 3.5", "3.5"),
    ("x = 1/2", "0.5"),
)


class RewardFunctionContract(ComponentContract):
    """Reward functions: finite float for typical and odd strings, determinism, batch == per-row, pipeline-safe."""

    kind: ClassVar[str] = "reward"

    @pytest.fixture
    def reward_cases(self) -> list[tuple[str, str]]:
        """Typical (response, target) pairs for your function; extend with domain cases."""
        return list(TYPICAL_REWARD_CASES)

    @pytest.fixture
    def plugin(self, component: Any, options: Any) -> Any:
        # As RewardPipeline builds it: reward classes get their options, plain functions are used as is.
        if inspect.isclass(component):
            problem = reward_component_problem(component)
            assert problem is None and is_reward_function(component), (
                f"{describe(component)}: a reward-function class must subclass rlhooks.RewardFunction "
                f"(or define __call__ and no hook){': ' + problem if problem else ''}"
            )
        return make_reward_function(component, options)

    def _score(self, fn: Any, response: str, target: str) -> float:
        value = fn(response, target)
        where = f"{describe(fn)}({response[:40]!r}{'...' if len(response) > 40 else ''}, {target[:40]!r})"
        assert isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)), (
            f"{where} returned {type(value).__name__} {value!r:.80}; a reward is a float"
        )
        assert math.isfinite(float(value)), f"{where} returned {value!r}; rewards must be finite"
        return float(value)

    def test_reward_is_reward_function(self, component: Any) -> None:
        assert is_reward_function(component), (
            f"{describe(component)} is neither a callable nor a RewardFunction subclass"
        )

    def test_reward_typical_cases_are_finite_floats(self, plugin: Any, reward_cases: list[tuple[str, str]]) -> None:
        for response, target in reward_cases:
            self._score(plugin, response, target)

    def test_reward_odd_strings_are_finite_floats(self, plugin: Any, reward_cases: list[tuple[str, str]]) -> None:
        """Empty, whitespace, unicode, control characters, 100k characters, as response and as target."""
        targets = [reward_cases[0][1], *ODD_STRINGS[:6]]
        for response in ODD_STRINGS:
            for target in targets:
                self._score(plugin, response, target)
        for target in ODD_STRINGS:
            self._score(plugin, reward_cases[0][0], target)

    def test_reward_is_deterministic(self, plugin: Any, reward_cases: list[tuple[str, str]]) -> None:
        for response, target in [*reward_cases, *((s, "42") for s in ODD_STRINGS[:6])]:
            assert self._score(plugin, response, target) == self._score(plugin, response, target), (
                f"{describe(plugin)} scored {response!r:.40} twice differently"
            )

    @requires("score_batch")
    def test_reward_score_batch_matches_per_row(self, plugin: Any, reward_cases: list[tuple[str, str]]) -> None:
        self._require_capability(plugin, "score_batch")
        batch_fn = plugin.score_batch
        pairs = [*reward_cases, *((s, reward_cases[0][1]) for s in ODD_STRINGS)]
        responses = np.asarray([p[0] for p in pairs], dtype=object)
        targets = np.asarray([p[1] for p in pairs], dtype=object)
        before = responses.copy(), targets.copy()
        out = np.asarray(resolve(batch_fn(responses, targets)), dtype=np.float64)  # async def: awaited
        assert out.shape == (len(pairs),), f"score_batch returned shape {out.shape}, expected ({len(pairs)},)"
        expected = np.asarray([self._score(plugin, r, t) for r, t in pairs])
        assert np.allclose(out, expected, rtol=1e-9, atol=1e-12), "score_batch() disagrees with per-row calls"
        assert np.array_equal(responses, before[0]) and np.array_equal(targets, before[1]), "score_batch mutated its inputs"
        empty = np.asarray(resolve(batch_fn(np.zeros(0, object), np.zeros(0, object))))
        assert empty.shape == (0,), f"score_batch of no rows returned shape {empty.shape}"

    @requires("score_batch")
    def test_reward_score_batch_scores_a_whole_batch_in_one_call(self, plugin: Any,
                                                                  reward_cases: list[tuple[str, str]]) -> None:
        """In a RewardPipeline, a function with score_batch gets the whole batch in one call (an LLM judge
        batches its requests) and the pipeline never falls back to scoring row by row."""
        self._require_capability(plugin, "score_batch")
        counting = _CountingScorer(plugin)
        pipe = RewardPipeline([RewardEntry("under_test", counting)])
        pairs = [*reward_cases, *((s, "42") for s in ODD_STRINGS)]
        res = pipe.score([p[0] for p in pairs], [p[1] for p in pairs])
        assert counting.batch_calls == [len(pairs)], (
            f"{describe(plugin)}.score_batch was called {counting.batch_calls} (rows per call) for one batch of "
            f"{len(pairs)} rows; expected one call with every row")
        assert counting.row_calls == 0, (
            f"the pipeline scored {counting.row_calls} rows one by one: {describe(plugin)}.score_batch raised or "
            f"returned the wrong shape (the log says which)")
        assert res.components["under_test"].shape == (len(pairs),) and not res.errors

    def test_reward_through_pipeline(self, plugin: Any, reward_cases: list[tuple[str, str]]) -> None:
        """In a RewardPipeline with weight 2 no sample errors and total = 2 * component."""
        pipe = RewardPipeline([RewardEntry("under_test", plugin, weight=2.0)])
        pairs = [*reward_cases, *((s, "42") for s in ODD_STRINGS)]
        res = pipe.score([p[0] for p in pairs], [p[1] for p in pairs])
        assert not res.errors, f"{describe(plugin)} raised inside the pipeline on {res.errors}"
        assert np.allclose(res.total, 2.0 * res.components["under_test"])
        assert np.all(np.isfinite(res.total))


class _CountingScorer:
    """A reward function as the pipeline sees it, counting whole-batch and per-row calls."""

    def __init__(self, fn: Any) -> None:
        self.fn, self.batch_calls, self.row_calls = fn, [], 0

    def __call__(self, response: str, target: str) -> float:
        self.row_calls += 1
        return self.fn(response, target)

    def score_batch(self, responses: np.ndarray, targets: np.ndarray) -> Any:
        self.batch_calls.append(len(responses))
        return self.fn.score_batch(responses, targets)


@attrs.frozen
class ReadBack:
    """What a backend persisted, as read back from its output.

    metrics: step -> {metric name: value}; backends may add keys of their own.
    tables: (step, table name) -> rows; None when the backend does not persist tables.
    """

    metrics: Mapping[int, Mapping[str, Any]]
    tables: Mapping[tuple[int, str], list[Mapping[str, Any]]] | None = None


class BackendContract(ComponentContract):
    """Backends: everything logged before on_run_end is persisted by it (metrics, and tables if kept).

    Subclasses implement ``read_back(self, plugin, run_dir) -> ReadBack`` reading the backend's
    real output (files, event logs) the way a user would.
    """

    kind: ClassVar[str] = "backend"

    def read_back(self, plugin: Any, run_dir: Path) -> ReadBack:
        raise NotImplementedError(
            f"{type(self).__name__} must implement read_back(plugin, run_dir) -> rlhooks.testing.ReadBack, "
            f"reading what the backend wrote"
        )

    def _log_steps(self, h: PluginHarness, steps: tuple[int, ...]) -> tuple[dict[int, dict[str, Any]], dict]:
        sent: dict[int, dict[str, Any]] = {}
        tables: dict[tuple[int, str], list[dict[str, Any]]] = {}
        where = describe(h.plugin)
        for step in steps:
            metrics = make_step_metrics(step)
            metrics[f"test/step_{step}_only"] = step * 0.5  # a key only one step has
            sent[step] = metrics
            check_none_result(h.call("log_metrics", step=step, metrics=dict(metrics)), f"{where}.log_metrics")
            if h.implements("log_table"):
                rows = make_table_rows(3, seed=step)
                tables[(step, "samples/contract")] = rows
                check_none_result(h.call("log_table", step=step, name="samples/contract", rows=rows), f"{where}.log_table")
        return sent, tables

    def _check_read_back(self, plugin: Any, run_dir: Path, sent: dict, tables: dict) -> None:
        got = self.read_back(plugin, run_dir)
        assert isinstance(got, ReadBack), f"read_back() must return a ReadBack, got {type(got).__name__}"
        by_step = {int(s): m for s, m in got.metrics.items()}
        assert set(by_step) == set(sent), (
            f"{describe(plugin)} persisted metrics for steps {sorted(by_step)}, logged {sorted(sent)}"
        )
        problems = [f"step {step}: {d}" for step, m in sent.items() for d in checks.dict_differences(m, by_step[step])]
        assert not problems, f"{describe(plugin)} persisted different metrics:\n  " + "\n  ".join(problems[:20])
        if tables and got.tables is not None:
            assert set(got.tables) == set(tables), f"tables read back {sorted(got.tables)}, logged {sorted(tables)}"
            for key, rows in tables.items():
                back = got.tables[key]
                assert len(back) == len(rows), f"table {key}: {len(back)} rows read back, {len(rows)} logged"
                diffs = [f"row {i}: {d}" for i, (a, b) in enumerate(zip(rows, back)) for d in checks.dict_differences(a, b)]
                assert not diffs, f"table {key} read back differently:\n  " + "\n  ".join(diffs[:20])

    def test_backend_implements_log_metrics(self, harness: PluginHarness) -> None:
        assert harness.implements("log_metrics"), f"a backend must implement log_metrics ({describe(harness.plugin)})"

    def test_backend_flushes_everything_on_run_end(self, started: PluginHarness, run_dir: Path) -> None:
        sent, tables = self._log_steps(started, (1, 2, 5))
        check_none_result(started.end("success"), f"{describe(started.plugin)}.on_run_end")
        self._check_read_back(started.plugin, run_dir, sent, tables)

    def test_backend_flushes_on_failed_run(self, started: PluginHarness, run_dir: Path) -> None:
        sent, tables = self._log_steps(started, (1,))
        check_none_result(started.end("failed"), f"{describe(started.plugin)}.on_run_end")
        self._check_read_back(started.plugin, run_dir, sent, tables)

    def test_backend_through_dispatch_thread(self, plugin: Any, run_context: Any, run_dir: Path) -> None:
        """Called as a run calls it: behind rlhooks' dispatch queue, so on_run_start, the logging hooks
        and on_run_end run on the backend's own thread (open thread-bound handles such as an sqlite3
        connection in on_run_start, not in __init__); everything logged is read back."""
        from rlhooks.core.dispatch import wrap

        failures: list[str] = []
        component = _DispatchedBackend(plugin)
        proxy = wrap(component, lambda _c, hook, exc: failures.append(f"{hook}: {type(exc).__name__}: {exc}"))
        h = PluginHarness(proxy, run_context)
        try:
            if h.implements("on_run_start"):
                h.start()
            sent, tables = self._log_steps(h, (1, 2, 5))
            h.end("success")
        finally:
            h.close()
        assert not failures, (
            f"{describe(plugin)} failed on its dispatch thread (where a run calls it):\n  " + "\n  ".join(failures)
            + "\n  Objects bound to the thread that made them (sqlite3 connections, some clients) must be "
            "created in on_run_start, which runs on that thread, not in __init__."
        )
        self._check_read_back(plugin, run_dir, sent, tables)

    def test_backend_full_run_then_read_back(self, started: PluginHarness, run_dir: Path,
                                             trajectory_batch_factory: BatchFactory) -> None:
        """A full run's hook traffic, then the metrics of one more step are all read back."""
        from rlhooks.testing.contracts import _run_steps

        _run_steps(started, trajectory_batch_factory, steps=2, generations=1)
        sent, tables = self._log_steps(started, (3,))
        started.end("success")
        by_step = {int(s): m for s, m in self.read_back(started.plugin, run_dir).metrics.items()}
        assert {1, 2, 3} <= set(by_step), f"steps read back: {sorted(by_step)}, logged 1, 2, 3"
        problems = list(checks.dict_differences(sent[3], by_step[3]))
        assert not problems, "\n  ".join(problems)


@attrs.define
class _DispatchedBackend:
    """What rlhooks' dispatch needs to know about a backend (core/dispatch.py ``Component``)."""

    obj: Any
    name: str = "backend_under_test"
    kind: str = "backend"
    path: str = "backends[0]"
    distribution: str = "(contract test)"
    on_error: str = "warn"
    failures: int = 0
    disabled: bool = False
    deferred: bool = False
    dropped: int = 0

    @property
    def label(self) -> str:
        return f"{self.name} ({self.path})"


#: component kind -> its contract class (a meta-test keeps this complete)
COMPONENT_CONTRACTS: dict[str, type] = {
    "sampler": SamplerContract,
    "filter": FilterContract,
    "prompt_filter": PromptFilterContract,
    "reward": RewardFunctionContract,
    "backend": BackendContract,
    "plugin": HookPluginContract,
}

__all__ = [
    "ComponentContract", "SamplerContract", "FilterContract", "PromptFilterContract", "RewardFunctionContract", "BackendContract",
    "ReadBack", "COMPONENT_CONTRACTS", "KIND_SECTION", "TYPICAL_REWARD_CASES",
]
