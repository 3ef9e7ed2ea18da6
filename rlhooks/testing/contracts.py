"""One reusable contract class per hook spec, and HookPluginContract combining them.

A plugin author subclasses a contract in a ``Test*`` class and provides a ``plugin`` fixture
returning a fresh instance (a module works too)::

    from rlhooks.testing import HookPluginContract

    class TestMyPlugin(HookPluginContract):
        @pytest.fixture
        def plugin(self):
            return MyPlugin()

A suite that names the plugin's class at collection time (``plugin_class``, or
``component_under_test(params)`` for a suite parametrized over several plugins) collects only the
checks that apply to it: those of the hooks it implements (``test_<hook>_*``), and those marked
``@requires(...)`` whose capability it has (``state_dict``, ``score_batch``, ``Options``; see
``capabilities``). A suite that gives only a ``plugin`` fixture skips them at run time instead.
Checks that are expected to fail are declared by name (or ``name[param-id]``) and become strict xfails::

        xfail_checks = {"test_on_rewards_computed_empty_batch": "needs at least one group"}

Hooks are called through a real pluggy PluginManager carrying rlhooks' specs, in run order:
``on_run_start`` (with a RunContext over a temporary run directory) first, ``on_run_end`` last.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

import attrs
import numpy as np
import pytest

from rlhooks.core.batch import Batch
from rlhooks.core.components import instantiate, options_class
from rlhooks.core.hookspecs import HOOK_NAMES
from rlhooks.testing import checks
from rlhooks.testing.checks import PluginHarness, check_metrics_result, check_none_result, describe
from rlhooks.testing.factories import (
    RecordingRun,
    batch_differences,
    make_prompt_batch,
    make_run_context,
    make_step_metrics,
    make_table_rows,
    make_trajectory_batch,
    make_validation_results,
)

BatchFactory = Callable[..., Batch]


def hook_checked_by(check_name: str) -> str | None:
    """The hook a contract check exercises (hook checks are named ``test_<hook>_...``), or None."""
    base = check_name.split("[", 1)[0]
    for hook in sorted(HOOK_NAMES, key=len, reverse=True):
        if base.startswith(f"test_{hook}_"):
            return hook
    return None


def implemented_hooks(obj: Any) -> frozenset[str]:
    """Hooks a plugin class, instance or module implements (methods marked with ``@rlhooks.hookimpl``)."""
    return frozenset(h for h in HOOK_NAMES if getattr(getattr(obj, h, None), "rlhooks_impl", None) is not None)


#: capabilities a check may require (``@requires``) besides its hook
METHOD_CAPABILITIES = ("state_dict", "score_batch")
#: pseudo-capabilities of a suite: it names the plugin's class at collection; it gives an entry-point name
KNOWN_AT_COLLECTION = "known at collection"
ENTRY_POINT = "entry point"


def capabilities(obj: Any) -> frozenset[str]:
    """What decides which checks apply to a plugin (class, instance, function or module): the hooks it
    implements, the methods of ``METHOD_CAPABILITIES`` it has, and ``Options`` when it declares one."""
    have = {name for name in METHOD_CAPABILITIES if getattr(obj, name, None) is not None}
    if getattr(obj, "Options", None) is not None:
        have.add("Options")
    return implemented_hooks(obj) | have


def requires(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a check as applying only to a plugin with these capabilities (see ``capabilities``)."""

    def mark(check: Callable[..., Any]) -> Callable[..., Any]:
        check.rlhooks_requires = frozenset(names)  # type: ignore[attr-defined]
        return check

    return mark


def gives_entry_point(cls: type) -> bool:
    """Whether a contract subclass gives its own ``entry_point_name`` fixture (the kit's returns None)."""
    owner = next((c for c in cls.__mro__ if "entry_point_name" in vars(c)), None)
    return owner is not None and owner.__module__ not in (__name__, "rlhooks.testing.components")


def required_by(check: Callable[..., Any], name: str) -> frozenset[str]:
    """Everything a check requires of the plugin: its hook (from its name) and its ``@requires`` marks."""
    hook = hook_checked_by(name)
    return frozenset(getattr(check, "rlhooks_requires", ())) | ({hook} if hook else set())


class _ContractBase:
    """Fixtures shared by every contract. Override any of them in your subclass."""

    #: check name (or ``name[param-id]``) -> reason; turned into strict xfail markers
    xfail_checks: ClassVar[Mapping[str, str]] = {}

    @pytest.fixture
    def plugin(self) -> Any:
        if self.plugin_class is not None:  # built as a run builds it, with default options
            opts = options_class(self.plugin_class)
            return instantiate(self.plugin_class, opts() if opts is not None else None)
        pytest.fail(
            f"{type(self).__name__} must set `plugin_class = <the class>` or provide a `plugin` fixture returning "
            f"a fresh instance of the plugin under test (see rlhooks.testing)"
        )

    @pytest.fixture
    def run_dir(self, tmp_path: Path) -> Path:
        path = tmp_path / "run"
        path.mkdir()
        return path

    @pytest.fixture
    def run_context(self, run_dir: Path) -> RecordingRun:
        """The RunContext passed to on_run_start (records emitted tables and histograms)."""
        return make_run_context(run_dir)

    @pytest.fixture
    def prompt_batch_factory(self) -> BatchFactory:
        """``factory(n_prompts, seed=, step=, generation=) -> Batch`` of prompt rows; deterministic."""
        return make_prompt_batch

    @pytest.fixture
    def trajectory_batch_factory(self) -> BatchFactory:
        """``factory(n_groups, group_size, seed=, step=, generation=, advantage=) -> Batch``; deterministic."""
        return make_trajectory_batch

    @pytest.fixture
    def harness(self, plugin: Any, run_context: RecordingRun) -> Iterator[PluginHarness]:
        """The plugin on its own PluginManager; not started yet."""
        h = PluginHarness(plugin, run_context)
        yield h
        h.close()

    @pytest.fixture
    def started(self, harness: PluginHarness) -> PluginHarness:
        """The harness after on_run_start (when the plugin implements it)."""
        if harness.implements("on_run_start"):
            check_none_result(harness.start(), f"{describe(harness.plugin)}.on_run_start")
        harness.started = True
        return harness

    #: the plugin's class (function, or module), when a suite tests one known class: the checks that
    #: do not apply to it are then not collected (instead of skipping at run time)
    plugin_class: ClassVar[Any] = None

    @classmethod
    def component_under_test(cls, params: Mapping[str, Any]) -> Any:
        """The class (function, module) of the plugin a test's parameters select, known at collection time.

        ``params`` are the test's parametrized values (``{"builtin": ...}`` for a fixture with
        ``params``). None when only the ``plugin`` fixture knows; then checks that do not apply skip
        at run time. By default ``plugin_class``; a suite parametrized over several plugins returns
        the class its parameters select, so that it collects only the (plugin, check) pairs that apply.
        """
        return cls.plugin_class

    @classmethod
    def hooks_under_test(cls, params: Mapping[str, Any]) -> frozenset[str] | None:
        """The hooks implemented by the plugin that a test's parameters select, known at collection time;
        by default those of ``component_under_test(params)``. Kept for suites that override it."""
        known = cls.component_under_test(params)
        return None if known is None else implemented_hooks(known)

    # -- helpers for checks ------------------------------------------------------------
    @staticmethod
    def _require(harness: PluginHarness, hook: str) -> None:
        if not harness.implements(hook):
            # reached only when the suite does not name the plugin's class (plugin_class)
            pytest.skip("the plugin under test does not implement this hook")

    @staticmethod
    def _require_capability(obj: Any, name: str) -> None:
        """Run-time fallback of ``@requires`` for a suite that does not name the plugin's class."""
        if name not in capabilities(obj):
            pytest.skip(f"{describe(obj)} has no {name} (name its class in plugin_class: this check is then not collected)")

    @staticmethod
    def _where(harness: PluginHarness, hook: str) -> str:
        return f"{describe(harness.plugin)}.{hook}"

    def _call_metrics_hook_unmutated(
        self, harness: PluginHarness, hook: str, factory: Callable[[], Batch], step: int = 1, **extra: Any
    ) -> Any:
        """Call a batch hook on a fresh batch; assert the batch equals an identical untouched one."""
        batch, reference = factory(), factory()
        where = self._where(harness, hook)
        with checks.refusing_batch_writes(where):
            result = harness.call(hook, step=step, batch=batch, **extra)
        check_metrics_result(result, where)
        problems = batch_differences(reference, batch)
        assert not problems, f"{where} mutated its batch (it must treat it as read-only):\n  " + "\n  ".join(problems)
        checks.check_emitted(harness.run, where)
        return result


class OnRunStartContract(_ContractBase):
    """on_run_start: returns None, leaves the config untouched, tolerates an immediate on_run_end."""

    def test_on_run_start_returns_none(self, harness: PluginHarness) -> None:
        self._require(harness, "on_run_start")
        check_none_result(harness.start(), self._where(harness, "on_run_start"))
        checks.check_emitted(harness.run, self._where(harness, "on_run_start"))

    def test_on_run_start_does_not_mutate_config(self, harness: PluginHarness) -> None:
        self._require(harness, "on_run_start")
        config = harness.run.config
        before = config.resolved(redact=False), checks.frozen_copy(dict(config.raw))
        harness.start()
        after = config.resolved(redact=False), dict(config.raw)
        assert after == before, f"{self._where(harness, 'on_run_start')} mutated run.config"

    def test_on_run_start_run_dir_may_be_reused(self, harness: PluginHarness, plugin: Any) -> None:
        """Files from an earlier attempt in the run directory (a resumed run) do not break start."""
        self._require(harness, "on_run_start")
        run_dir: Path = harness.run.run_dir
        (run_dir / "leftover.txt").write_text("from an earlier attempt\n")
        check_none_result(harness.start(), self._where(harness, "on_run_start"))


class OnBatchSampledContract(_ContractBase):
    """on_batch_sampled: metrics or None; batch read-only; empty and single-row batches; many generations."""

    def test_on_batch_sampled_returns_metrics_or_none(self, started: PluginHarness, prompt_batch_factory: BatchFactory) -> None:
        self._require(started, "on_batch_sampled")
        self._call_metrics_hook_unmutated(started, "on_batch_sampled", lambda: prompt_batch_factory(8, seed=1))

    def test_on_batch_sampled_does_not_mutate_batch(self, started: PluginHarness, prompt_batch_factory: BatchFactory) -> None:
        self._require(started, "on_batch_sampled")
        for step in (1, 2):
            self._call_metrics_hook_unmutated(
                started, "on_batch_sampled", lambda: prompt_batch_factory(16, seed=step, step=step), step=step
            )

    def test_on_batch_sampled_empty_batch(self, started: PluginHarness, prompt_batch_factory: BatchFactory) -> None:
        self._require(started, "on_batch_sampled")
        self._call_metrics_hook_unmutated(started, "on_batch_sampled", lambda: prompt_batch_factory(0, seed=2))

    def test_on_batch_sampled_single_row(self, started: PluginHarness, prompt_batch_factory: BatchFactory) -> None:
        self._require(started, "on_batch_sampled")
        self._call_metrics_hook_unmutated(started, "on_batch_sampled", lambda: prompt_batch_factory(1, seed=3))

    def test_on_batch_sampled_several_generations(self, started: PluginHarness, prompt_batch_factory: BatchFactory) -> None:
        """Dynamic sampling: the hook fires several times per step, generation 1, 2, 3."""
        self._require(started, "on_batch_sampled")
        for gen in (1, 2, 3):
            self._call_metrics_hook_unmutated(
                started, "on_batch_sampled", lambda: prompt_batch_factory(4, seed=10 + gen, step=1, generation=gen)
            )


class OnRewardsComputedContract(_ContractBase):
    """on_rewards_computed: metrics or None; batch read-only; empty, single-row, single-response groups."""

    def test_on_rewards_computed_returns_metrics_or_none(
        self, started: PluginHarness, trajectory_batch_factory: BatchFactory
    ) -> None:
        self._require(started, "on_rewards_computed")
        self._call_metrics_hook_unmutated(started, "on_rewards_computed", lambda: trajectory_batch_factory(4, 4, seed=1))

    def test_on_rewards_computed_does_not_mutate_batch(
        self, started: PluginHarness, trajectory_batch_factory: BatchFactory
    ) -> None:
        self._require(started, "on_rewards_computed")
        for step in (1, 2):
            self._call_metrics_hook_unmutated(
                started, "on_rewards_computed",
                lambda: trajectory_batch_factory(6, 4, seed=step, step=step, uniform_groups=2), step=step,
            )

    def test_on_rewards_computed_empty_batch(self, started: PluginHarness, trajectory_batch_factory: BatchFactory) -> None:
        self._require(started, "on_rewards_computed")
        self._call_metrics_hook_unmutated(started, "on_rewards_computed", lambda: trajectory_batch_factory(0, 4, seed=2))

    def test_on_rewards_computed_single_row(self, started: PluginHarness, trajectory_batch_factory: BatchFactory) -> None:
        self._require(started, "on_rewards_computed")
        self._call_metrics_hook_unmutated(started, "on_rewards_computed", lambda: trajectory_batch_factory(1, 1, seed=3))

    def test_on_rewards_computed_single_response_groups(
        self, started: PluginHarness, trajectory_batch_factory: BatchFactory
    ) -> None:
        """n=1: every group has one response (zero within-group variance)."""
        self._require(started, "on_rewards_computed")
        self._call_metrics_hook_unmutated(started, "on_rewards_computed", lambda: trajectory_batch_factory(8, 1, seed=4))

    def test_on_rewards_computed_several_generations(
        self, started: PluginHarness, trajectory_batch_factory: BatchFactory
    ) -> None:
        self._require(started, "on_rewards_computed")
        for gen in (1, 2, 3):
            self._call_metrics_hook_unmutated(
                started, "on_rewards_computed", lambda: trajectory_batch_factory(3, 4, seed=20 + gen, generation=gen)
            )


class OnStepEndContract(_ContractBase):
    """on_step_end: metrics or None; batch and metrics read-only; empty (nothing trained) and tiny batches."""

    def _step_end(self, h: PluginHarness, factory: Callable[[], Batch], step: int = 1) -> Any:
        metrics = make_step_metrics(step)
        sent = checks.frozen_copy(metrics)
        result = self._call_metrics_hook_unmutated(h, "on_step_end", factory, step=step, metrics=metrics)
        assert metrics.keys() == sent.keys() and all(
            checks.values_equal(sent[k], metrics[k], rel=0) for k in sent
        ), f"{self._where(h, 'on_step_end')} mutated the metrics it received"
        return result

    def test_on_step_end_returns_metrics_or_none(self, started: PluginHarness, trajectory_batch_factory: BatchFactory) -> None:
        self._require(started, "on_step_end")
        self._step_end(started, lambda: trajectory_batch_factory(4, 4, seed=1, advantage=True))

    def test_on_step_end_does_not_mutate_inputs(self, started: PluginHarness, trajectory_batch_factory: BatchFactory) -> None:
        self._require(started, "on_step_end")
        for step in (1, 2, 3):
            self._step_end(started, lambda: trajectory_batch_factory(5, 4, seed=step, step=step, advantage=True), step)

    def test_on_step_end_empty_batch(self, started: PluginHarness, trajectory_batch_factory: BatchFactory) -> None:
        """With on_gen_limit: continue a step may train on nothing."""
        self._require(started, "on_step_end")
        self._step_end(started, lambda: trajectory_batch_factory(0, 4, seed=2, advantage=True))

    def test_on_step_end_single_row(self, started: PluginHarness, trajectory_batch_factory: BatchFactory) -> None:
        self._require(started, "on_step_end")
        self._step_end(started, lambda: trajectory_batch_factory(1, 1, seed=3, advantage=True))

    def test_on_step_end_read_only_metrics_view(self, started: PluginHarness, trajectory_batch_factory: BatchFactory) -> None:
        """The manager passes metrics as a read-only mapping; the plugin must not need a dict."""
        self._require(started, "on_step_end")
        result = started.call(
            "on_step_end", step=1, batch=trajectory_batch_factory(2, 2, seed=5), metrics=MappingProxyType(make_step_metrics(1))
        )
        check_metrics_result(result, self._where(started, "on_step_end"))


class OnValidationEndContract(_ContractBase):
    """on_validation_end: None or a metrics dict; metrics and per_source read-only; step 0, odd sources."""

    def _validation_end(self, h: PluginHarness, step: int, results: tuple[dict[str, Any], dict[str, dict[str, float]]]) -> Any:
        metrics, per_source = results
        sent_metrics, sent_sources = checks.frozen_copy(metrics), checks.frozen_copy(per_source)
        where = self._where(h, "on_validation_end")
        result = h.call("on_validation_end", step=step, metrics=MappingProxyType(metrics),
                        per_source=MappingProxyType({s: MappingProxyType(m) for s, m in per_source.items()}))
        check_metrics_result(result, where)
        assert metrics == sent_metrics and per_source == sent_sources, f"{where} mutated the validation results"
        checks.check_emitted(h.run, where)
        return result

    def test_on_validation_end_returns_metrics_or_none(self, started: PluginHarness) -> None:
        self._require(started, "on_validation_end")
        for step in (2, 4):
            self._validation_end(started, step, make_validation_results(step))

    def test_on_validation_end_before_training(self, started: PluginHarness) -> None:
        """verl's val_before_train validates at step 0, before any on_step_end."""
        self._require(started, "on_validation_end")
        self._validation_end(started, 0, make_validation_results(0))

    def test_on_validation_end_sources_it_never_trained_on(self, started: PluginHarness,
                                                           trajectory_batch_factory: BatchFactory) -> None:
        """Held-out sets may hold sources (with '/' in their names) that training never drew, or none at all."""
        self._require(started, "on_validation_end")
        _run_steps(started, trajectory_batch_factory, steps=1, generations=1)
        self._validation_end(started, 1, make_validation_results(1, sources=("held/out", "openai/gsm8k")))
        self._validation_end(started, 2, ({}, {}))


class OnSaveCheckpointContract(_ContractBase):
    """on_save_checkpoint: returns None; writes only inside the checkpoint directory; several saves."""

    def _save(self, h: PluginHarness, step: int, checkpoint_dir: Path, run_dir: Path) -> None:
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        outside = checks.tree(checkpoint_dir.parent, skip=checkpoint_dir)
        check_none_result(h.call("on_save_checkpoint", step=step, checkpoint_dir=checkpoint_dir),
                          self._where(h, "on_save_checkpoint"))
        assert checks.tree(checkpoint_dir.parent, skip=checkpoint_dir) == outside, (
            f"{self._where(h, 'on_save_checkpoint')} wrote outside checkpoint_dir ({checkpoint_dir})")

    def test_on_save_checkpoint_returns_none(self, started: PluginHarness, run_dir: Path, tmp_path: Path,
                                             trajectory_batch_factory: BatchFactory) -> None:
        self._require(started, "on_save_checkpoint")
        _run_steps(started, trajectory_batch_factory, steps=2, generations=1)
        self._save(started, 2, tmp_path / "ckpt" / "global_step_2", run_dir)

    def test_on_save_checkpoint_every_few_steps(self, started: PluginHarness, run_dir: Path, tmp_path: Path,
                                                trajectory_batch_factory: BatchFactory) -> None:
        """Saves at several steps, each into its own directory (verl keeps global_step_<N> folders)."""
        self._require(started, "on_save_checkpoint")
        for step in (1, 2, 3):
            _run_steps(started, trajectory_batch_factory, steps=1, generations=1)
            self._save(started, step, tmp_path / "ckpt" / f"global_step_{step}", run_dir)


class OnLoadCheckpointContract(_ContractBase):
    """on_load_checkpoint: fires before on_run_start on a resumed run, on what on_save_checkpoint wrote."""

    def test_on_load_checkpoint_before_run_start(self, harness: PluginHarness, tmp_path: Path) -> None:
        """A checkpoint without the plugin's own files (one made before the plugin was added) loads."""
        self._require(harness, "on_load_checkpoint")
        d = tmp_path / "ckpt" / "global_step_3"
        d.mkdir(parents=True)
        check_none_result(harness.call("on_load_checkpoint", step=3, checkpoint_dir=d),
                          self._where(harness, "on_load_checkpoint"))
        if harness.implements("on_run_start"):
            check_none_result(harness.start(), self._where(harness, "on_run_start"))

    def test_on_load_checkpoint_reads_what_save_wrote(self, started: PluginHarness, tmp_path: Path,
                                                      trajectory_batch_factory: BatchFactory) -> None:
        self._require(started, "on_load_checkpoint")
        d = tmp_path / "ckpt" / "global_step_2"
        d.mkdir(parents=True)
        _run_steps(started, trajectory_batch_factory, steps=2, generations=1)
        if started.implements("on_save_checkpoint"):
            check_none_result(started.call("on_save_checkpoint", step=2, checkpoint_dir=d),
                              self._where(started, "on_save_checkpoint"))
        before = checks.tree(d)
        check_none_result(started.call("on_load_checkpoint", step=2, checkpoint_dir=d),
                          self._where(started, "on_load_checkpoint"))
        assert checks.tree(d) == before, f"{self._where(started, 'on_load_checkpoint')} changed the checkpoint's files"


class LogMetricsContract(_ContractBase):
    """log_metrics: returns None; metrics read-only; empty dicts, numpy scalars, NaN, sparse steps."""

    def _log_metrics(self, h: PluginHarness, step: int, metrics: dict[str, Any]) -> None:
        sent = checks.frozen_copy(metrics)
        check_none_result(h.call("log_metrics", step=step, metrics=metrics), self._where(h, "log_metrics"))
        assert metrics.keys() == sent.keys() and all(
            checks.values_equal(sent[k], metrics[k], rel=0) for k in sent
        ), f"{self._where(h, 'log_metrics')} mutated the metrics it received"

    def test_log_metrics_returns_none(self, started: PluginHarness) -> None:
        self._require(started, "log_metrics")
        self._log_metrics(started, 1, make_step_metrics(1))

    def test_log_metrics_does_not_mutate_metrics(self, started: PluginHarness) -> None:
        self._require(started, "log_metrics")
        for step in (1, 2, 3):
            self._log_metrics(started, step, make_step_metrics(step))

    def test_log_metrics_empty_dict(self, started: PluginHarness) -> None:
        self._require(started, "log_metrics")
        self._log_metrics(started, 1, {})

    def test_log_metrics_value_types(self, started: PluginHarness) -> None:
        """ints, bools, numpy scalars of several widths, NaN and inf are all valid metric values."""
        self._require(started, "log_metrics")
        self._log_metrics(started, 1, {
            "a/int": 3, "a/bool": True, "a/np_int32": np.int32(7), "a/np_float16": np.float16(0.5),
            "a/nan": float("nan"), "a/inf": float("inf"), "a/neg": -1e-12, "a/big": 1e300,
        })

    def test_log_metrics_non_consecutive_steps(self, started: PluginHarness) -> None:
        """Backends must log with the explicit step (resumed runs start past 1)."""
        self._require(started, "log_metrics")
        for step in (5, 6, 40):
            self._log_metrics(started, step, make_step_metrics(step))


class LogTableContract(_ContractBase):
    """log_table: returns None; rows read-only; empty tables; rows with differing keys and odd text."""

    def _log_table(self, h: PluginHarness, step: int, name: str, rows: list[dict[str, Any]]) -> None:
        sent = checks.frozen_copy(rows)
        check_none_result(h.call("log_table", step=step, name=name, rows=rows), self._where(h, "log_table"))
        assert rows == sent, f"{self._where(h, 'log_table')} mutated the rows it received"

    def test_log_table_returns_none(self, started: PluginHarness) -> None:
        self._require(started, "log_table")
        self._log_table(started, 1, "samples/top_bottom_k", make_table_rows(4))

    def test_log_table_does_not_mutate_rows(self, started: PluginHarness) -> None:
        self._require(started, "log_table")
        for step in (1, 2):
            self._log_table(started, step, "samples/random", make_table_rows(6, seed=step))

    def test_log_table_empty_rows(self, started: PluginHarness) -> None:
        self._require(started, "log_table")
        self._log_table(started, 1, "samples/empty", [])

    def test_log_table_single_row_differing_keys(self, started: PluginHarness) -> None:
        self._require(started, "log_table")
        self._log_table(started, 1, "samples/one", make_table_rows(1, seed=3))
        self._log_table(started, 1, "samples/two", make_table_rows(2, seed=4))  # row 2 has an extra key


class LogHistogramContract(_ContractBase):
    """log_histogram: returns None; values read-only; empty and single-value arrays."""

    def _log_histogram(self, h: PluginHarness, step: int, name: str, values: np.ndarray) -> None:
        sent = values.copy()
        check_none_result(h.call("log_histogram", step=step, name=name, values=values), self._where(h, "log_histogram"))
        assert np.array_equal(values, sent), f"{self._where(h, 'log_histogram')} mutated the values it received"

    def test_log_histogram_returns_none(self, started: PluginHarness) -> None:
        self._require(started, "log_histogram")
        self._log_histogram(started, 1, "rewards/distribution", np.random.default_rng(0).normal(size=256))

    def test_log_histogram_empty_values(self, started: PluginHarness) -> None:
        self._require(started, "log_histogram")
        self._log_histogram(started, 1, "rewards/distribution", np.zeros(0))

    def test_log_histogram_single_value(self, started: PluginHarness) -> None:
        self._require(started, "log_histogram")
        self._log_histogram(started, 2, "rewards/distribution", np.array([0.25]))


class OnRunEndContract(_ContractBase):
    """on_run_end: returns None for every status, also right after start (a run that failed early)."""

    @pytest.mark.parametrize("status", checks.STATUSES)
    def test_on_run_end_returns_none(self, started: PluginHarness, status: str) -> None:
        self._require(started, "on_run_end")
        check_none_result(started.end(status), self._where(started, "on_run_end"))

    def test_on_run_end_after_steps(self, started: PluginHarness, trajectory_batch_factory: BatchFactory) -> None:
        self._require(started, "on_run_end")
        _run_steps(started, trajectory_batch_factory, steps=2)
        check_none_result(started.end("success"), self._where(started, "on_run_end"))


def _run_steps(h: PluginHarness, trajectory_batch_factory: BatchFactory, steps: int = 3, generations: int = 2,
               prompt_batch_factory: BatchFactory = make_prompt_batch) -> None:
    """The hook traffic of ``steps`` steps, as the StepDriver sends it."""
    where = describe(h.plugin)
    for step in range(1, steps + 1):
        merged: dict[str, Any] = make_step_metrics(step)
        trained = []
        for gen in range(1, generations + 1):
            seed = 100 * step + gen
            r = h.call("on_batch_sampled", step=step, batch=prompt_batch_factory(4, seed=seed, step=step, generation=gen))
            check_metrics_result(r, f"{where}.on_batch_sampled")
            merged.update(r or {})
            traj = trajectory_batch_factory(4, 4, seed=seed, step=step, generation=gen, uniform_groups=1)
            r = h.call("on_rewards_computed", step=step, batch=traj)
            check_metrics_result(r, f"{where}.on_rewards_computed")
            merged.update(r or {})
            trained.append(traj)
        batch = Batch.concat(trained).with_meta(step=step)
        r = h.call("on_step_end", step=step, batch=batch, metrics=MappingProxyType(dict(merged)))
        check_metrics_result(r, f"{where}.on_step_end")
        merged.update(r or {})
        check_none_result(h.call("log_metrics", step=step, metrics=MappingProxyType(dict(merged))), f"{where}.log_metrics")
        check_none_result(h.call("log_table", step=step, name="samples/test", rows=make_table_rows(3, seed=step)),
                          f"{where}.log_table")
        check_none_result(h.call("log_histogram", step=step, name="rewards/distribution",
                                 values=np.linspace(0, 1, 11)), f"{where}.log_histogram")
        checks.check_emitted(h.run, where)


class HookPluginContract(
    OnLoadCheckpointContract,
    OnRunStartContract,
    OnBatchSampledContract,
    OnRewardsComputedContract,
    OnValidationEndContract,
    OnStepEndContract,
    LogMetricsContract,
    LogTableContract,
    LogHistogramContract,
    OnSaveCheckpointContract,
    OnRunEndContract,
):
    """Every hook contract plus registration checks and a full run; for hook-only plugins."""

    #: a hook-only plugin must implement at least one hook (components may implement none)
    requires_hooks: ClassVar[bool] = True
    #: the component kind whose entry-point group ``entry_point_name`` is looked up in
    kind: ClassVar[str] = "plugin"

    @pytest.fixture
    def entry_point_name(self) -> str | None:
        """The installed entry-point name; without this fixture the entry-point and YAML checks are not collected
        (a fixture of yours returning None skips them)."""
        return None

    @pytest.fixture
    def component_kind(self) -> str:
        """The component's kind (sampler, filter, reward, backend, plugin); the class's ``kind`` by default."""
        return self.kind

    @requires(ENTRY_POINT)
    def test_entry_point_resolves(self, entry_point_name: str | None, plugin: Any, component_kind: str) -> None:
        """The installed entry point loads this plugin's class (or module), and a config naming it validates."""
        if entry_point_name is None:
            pytest.skip("no entry_point_name fixture given")
        from rlhooks.core.config import SECTIONS, _converter, load_config
        from rlhooks.core.registry import Registry

        info = Registry().info(component_kind, entry_point_name)  # unknown or broken: fails here, with its error
        loaded = info.load()
        expected = plugin if inspect.ismodule(plugin) else type(plugin)
        assert loaded is expected or loaded is plugin, (
            f"entry point {info.where} loads {loaded!r}, not {describe(plugin)}"
        )
        item: dict[str, Any] = {"name": entry_point_name}
        if attrs.has(type(getattr(plugin, "options", None))):  # the plugin's own options, as YAML would give them
            item.update(_converter.unstructure(plugin.options))
        section = next(sec for sec, (kind, _) in SECTIONS.items() if kind == component_kind and sec != "samples")
        cfg = load_config({section: item if section == "sampler" else [item]})
        # a bare or a qualified (<distribution>:<name>) name: the config resolves it as the registry does
        named = [c.qualified_name for c in cfg.components()]
        assert info.qualified in named, f"a config naming {entry_point_name!r} resolves to {named}, not {info.qualified}"

    def test_registers_on_plugin_manager(self, harness: PluginHarness) -> None:
        """Registers on a pluggy PluginManager with rlhooks' specs; check_pending passes (no unknown hooks)."""
        unknown = set(harness.hooks) - set(HOOK_NAMES)
        assert not unknown, f"{describe(harness.plugin)} implements hooks rlhooks does not define: {sorted(unknown)}"
        if self.requires_hooks:
            assert harness.hooks, (
                f"{describe(harness.plugin)} implements no hook: decorate its hook methods with "
                f"@rlhooks.hookimpl (hooks: {', '.join(HOOK_NAMES)})"
            )

    def test_hook_argument_names_are_spec_arguments(self, harness: PluginHarness) -> None:
        specs = checks.spec_argnames()
        bad = []
        for caller in harness.pm.get_hookcallers(harness.plugin) or []:
            for impl in caller.get_hookimpls():
                extra = set(impl.argnames) - set(specs[caller.name])
                if extra:
                    bad.append(f"{caller.name}{tuple(impl.argnames)}: {sorted(extra)} not in {specs[caller.name]}")
        assert not bad, f"{describe(harness.plugin)} asks for arguments its hooks do not have:\n  " + "\n  ".join(bad)

    def test_hook_like_methods_are_registered(self, harness: PluginHarness) -> None:
        """A method named like a hook but not decorated (or misspelled) would silently never run."""
        problems = checks.hook_like_undecorated(harness.plugin, harness.hooks)
        assert not problems, f"{describe(harness.plugin)}:\n  " + "\n  ".join(problems)

    @requires(KNOWN_AT_COLLECTION)
    def test_plugin_class_is_the_plugin(self, request: pytest.FixtureRequest, plugin: Any) -> None:
        """The class the suite named at collection (which decided the checks collected) has what the plugin
        under test has: no check was left out that applies to the plugin."""
        params = dict(request.node.callspec.params) if hasattr(request.node, "callspec") else {}
        known = self.component_under_test(params)
        hooks = self.hooks_under_test(params)
        named = capabilities(known) - implemented_hooks(known) | (hooks if hooks is not None else implemented_hooks(known))
        assert capabilities(plugin) == named, (
            f"{describe(plugin)} has {sorted(capabilities(plugin))}, but the class this suite names at collection "
            f"({describe(known)}) has {sorted(named)}: the checks collected were chosen for the wrong plugin")

    @requires("state_dict")
    def test_state_dict_round_trip(self, started: PluginHarness, trajectory_batch_factory: BatchFactory) -> None:
        """A plugin with ``state_dict()`` (saved with the run's checkpoint) pickles it and loads it back
        into a resumed run: the state after ``load_state_dict`` is the one saved."""
        import pickle

        plugin = started.plugin
        self._require_capability(plugin, "state_dict")
        where = describe(plugin)
        assert callable(getattr(plugin, "load_state_dict", None)), (
            f"{where} has state_dict() but no load_state_dict(state): a resumed run could not restore it")
        _run_steps(started, trajectory_batch_factory, steps=2, generations=1)
        state = plugin.state_dict()
        saved = pickle.dumps(state)  # as verl's rlhooks.pt and the simulator's checkpoint hold it
        _run_steps(started, trajectory_batch_factory, steps=1, generations=1)  # moves on past the checkpoint
        plugin.load_state_dict(pickle.loads(saved))
        assert _canonical(plugin.state_dict()) == _canonical(state), (
            f"{where}: after load_state_dict(saved), state_dict() differs from the saved state")

    def test_run_dir_files_are_claimed(self, harness: PluginHarness, trajectory_batch_factory: BatchFactory,
                                       prompt_batch_factory: BatchFactory) -> None:
        """Every file the plugin creates in the run directory is the run's, so a rerun of the same run
        name replaces it: claimed (``rlhooks.claim_output`` / ``open_output``), or created by the run's
        process while the run held its directory (an older plugin's ``open``: the run's end records it).
        One another process writes, one a library writes from native code (``torch.save`` to a path) and
        one written after the run ended are not seen as the run's, and make the rerun refuse."""
        unclaimed, refusal = _claimed_run(harness, trajectory_batch_factory, prompt_batch_factory)
        assert not unclaimed, (
            f"{describe(harness.plugin)} left {', '.join(map(repr, unclaimed))} in the run directory, which rlhooks "
            f"cannot tell is the run's (written by another process, from native code such as torch.save to a "
            f"path, or after the run ended): a rerun of the same run name would refuse to replace the run. Call "
            f"rlhooks.claim_output(path) before creating it, or create it with rlhooks.open_output(path)"
        )
        assert refusal is None, f"a rerun of the run would refuse: {refusal}"

    def test_full_run_lifecycle(self, started: PluginHarness, trajectory_batch_factory: BatchFactory,
                                prompt_batch_factory: BatchFactory) -> None:
        """Three steps of two generation batches each, every hook in driver order, then on_run_end."""
        _run_steps(started, trajectory_batch_factory, steps=3, generations=2, prompt_batch_factory=prompt_batch_factory)
        check_none_result(started.end("success"), f"{describe(started.plugin)}.on_run_end")
        checks.check_emitted(started.run, describe(started.plugin))


def _canonical(value: Any) -> bytes:
    """A state as comparable bytes: dict keys sorted, arrays by dtype, shape and bytes (NaN equals NaN)."""
    import pickle

    def plain(v: Any) -> Any:
        if isinstance(v, Mapping):
            return ("dict", sorted(((repr(k), plain(x)) for k, x in v.items()), key=lambda kv: kv[0]))
        if isinstance(v, np.ndarray):
            return ("ndarray", str(v.dtype), v.shape, v.tobytes() if v.dtype != object else plain(v.tolist()))
        if isinstance(v, (list, tuple)):
            return (type(v).__name__, [plain(x) for x in v])
        if isinstance(v, (float, np.floating)):
            return ("float", repr(float(v)))
        return v

    return pickle.dumps(plain(value))


def _claimed_run(harness: PluginHarness, trajectory_batch_factory: BatchFactory,
                 prompt_batch_factory: BatchFactory) -> tuple[list[str], str | None]:
    """A full run of the plugin (2 steps, then a validation) inside a real rlhooks run directory, as
    ``rlhooks simulate`` makes it: (the entries it wrote without claiming them, the refusal a rerun of
    that run would give)."""
    from rlhooks.core import rundir

    run_dir = Path(harness.run.run_dir)
    command = "rlhooks contract test"
    try:
        rd = rundir.RunDirectory.create(run_dir.parent, run_dir.name, command=command)
    except rundir.RunDirError as exc:
        pytest.fail(f"this check runs the plugin in a fresh rlhooks run directory; the run_dir fixture must give an "
                    f"empty directory ({exc})")
    try:
        if harness.implements("on_run_start"):
            check_none_result(harness.start(), f"{describe(harness.plugin)}.on_run_start")
        harness.started = True
        _run_steps(harness, trajectory_batch_factory, steps=2, generations=1, prompt_batch_factory=prompt_batch_factory)
        if harness.implements("on_validation_end"):  # a plugin may log held-out results to a file of its own
            metrics, per_source = make_validation_results(2)
            per_source_view = MappingProxyType({src: MappingProxyType(m) for src, m in per_source.items()})
            check_metrics_result(harness.call("on_validation_end", step=2, metrics=MappingProxyType(metrics),
                                              per_source=per_source_view),
                                 f"{describe(harness.plugin)}.on_validation_end")
        check_none_result(harness.end("success"), f"{describe(harness.plugin)}.on_run_end")
    finally:
        rd.finish("success")
    unclaimed = sorted(n for n in os.listdir(run_dir) if n not in rundir.BOOKKEEPING and n not in rd.owned)
    try:
        rundir.check_replaceable(run_dir, command)
        refusal = None
    except rundir.RunDirError as exc:
        refusal = str(exc)
    return unclaimed, refusal


#: hook name -> the contract class that checks it (a meta-test keeps this complete)
HOOK_CONTRACTS: dict[str, type] = {
    "on_load_checkpoint": OnLoadCheckpointContract,
    "on_run_start": OnRunStartContract,
    "on_validation_end": OnValidationEndContract,
    "on_save_checkpoint": OnSaveCheckpointContract,
    "on_batch_sampled": OnBatchSampledContract,
    "on_rewards_computed": OnRewardsComputedContract,
    "on_step_end": OnStepEndContract,
    "log_metrics": LogMetricsContract,
    "log_table": LogTableContract,
    "log_histogram": LogHistogramContract,
    "on_run_end": OnRunEndContract,
}
