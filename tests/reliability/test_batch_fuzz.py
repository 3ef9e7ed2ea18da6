"""Bad-input fuzzing of every built-in plugin with hypothesis.

Random trajectory batches (NaN, +-inf, huge values, empty batches, single-row groups, unicode and
very long text, missing columns, inconsistent meta) go through the hooks of a RunManager with
every built-in component (each sampler in turn, DAPO, source_metrics, reward_monitor, the three
sample tables; ``on_error: raise`` everywhere so no failure is swallowed), the merged metrics and
emitted tables go to every built-in backend, and random texts go through the reward functions.

Defined behaviour means:

* a batch with every standard column gives a result, whatever its values: no plugin fails, the
  sampler's weights stay a finite distribution and its next batch holds valid dataset indices;
* a batch missing columns gives a result or a ``PluginError`` naming a configured plugin and the
  missing column;
* backends accept every metric dict and table the plugins produce (no exception at all).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlhooks
import rlhooks.host
from rlhooks.core import batch as B
from rlhooks.core.errors import PluginError
from rlhooks.core.manager import merge_metrics
from rlhooks.core.rewards import RewardPipeline
from rlhooks.plugins.backends.console import ConsoleBackend
from rlhooks.plugins.backends.jsonl import JsonlBackend
from rlhooks.plugins.backends.tensorboard_backend import TensorBoardBackend
from rlhooks.plugins.backends.wandb_backend import WandbBackend
from rlhooks.plugins.rewards.functions import BUILTIN_FUNCTIONS, extract_answer
from rlhooks.testing import ODD_STRINGS, make_dataset, make_trajectory_batch

from .conftest import REWARD_FNS, read_jsonl

# float64 overflow near +-1e308 is an expected numpy warning here; results are checked instead
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

NAN, INF = math.nan, math.inf
SOURCES = ("gsm8k", "math", "日本語")  # the dataset's sources; batches also carry sources it lacks
#: degenerate generations (repeated tags) that once made the format regexes take ~50 s per response
PATHOLOGICAL = (
    "<reasoning>a" + "</reasoning>x" * 20_000,
    "<answer>x" * 20_000,
    "<reasoning>a</reasoning>" * 10_000,
    "<reasoning>r</reasoning><answer>" + "9," * 30_000 + "</answer>",
)
TEXTS = st.one_of(st.sampled_from(ODD_STRINGS + PATHOLOGICAL), st.text(max_size=40))
FLOATS = st.one_of(
    st.sampled_from([0.0, 1.0, -1.0, 3.0, NAN, INF, -INF, 1e308, -1e308, 5e-324]),
    st.floats(allow_nan=True, allow_infinity=True),
)
SOURCE_NAMES = st.one_of(st.sampled_from([*SOURCES, "", "None", "🚀" * 3, "s" * 5000, "a/b c"]), st.text(max_size=6))
#: columns a batch may lack (``uid``, ``data_source``, ``reward`` and ``index`` are promised by the contract)
DROPPABLE = (B.UID, B.INDEX, B.DATA_SOURCE, B.REWARD, "acc", B.FINAL_REWARD, B.COMPLEXITY, B.RESPONSE, B.TARGET,
             B.PROMPT, B.ADVANTAGE, "reward_fn/check_answer", B.RESPONSE_LENGTH)

SAMPLERS = {
    "multi_source": {"name": "multi_source", "adaptive_weights": True, "update_frequency": 1, "alpha": 0.5},
    "time_curriculum": {"name": "time_curriculum", "complexity_source": "math", "complexity_warmup_steps": 5,
                        "adaptive_weights": True, "update_frequency": 1},
    "reward_curriculum": {"name": "reward_curriculum", "complexity_source": "math", "reward_threshold": 0.5,
                          "min_batches_per_level": 0, "check_frequency": 1, "num_intervals": 3,
                          "focus_new_intervals": True, "adaptive_weights": True, "update_frequency": 1},
}


def _config(tmp_path: Path, sampler: dict) -> rlhooks.host.Config:
    raise_ = {"on_error": "raise"}
    return rlhooks.host.load_config({
        "run": {"name": "fuzz", "out_dir": str(tmp_path)},
        "sampler": {**sampler, **raise_},
        "filters": [{"name": "dapo", **raise_}],
        "rewards": [*({"name": f, **raise_} for f in REWARD_FNS), {"name": "source_metrics", **raise_},
                    {"name": "reward_monitor", "log_distributions": True, "history": 20, **raise_,
                     "alerts": [{"metric": "rewards/mean", "min_slope": 0.0, "window": 2},
                                {"metric": "rewards/std", "condition": "greater", "threshold": 0.0}]}],
        "samples": [{"name": "top_bottom_k", "k": 2, **raise_}, {"name": "random_samples", "k": 2, **raise_},
                    {"name": "per_source_samples", "k": 1, **raise_}],
    })


def _constant(values: np.ndarray) -> Any:
    return lambda: values


@st.composite
def trajectory_batches(draw: Any) -> tuple[rlhooks.Batch, frozenset[str]]:
    """A batch and the standard columns it lacks (none in about half the examples)."""
    sizes = draw(st.lists(st.integers(1, 4), max_size=6))  # single-row groups included; [] = empty batch
    n_groups, n = len(sizes), sum(sizes)
    rep = np.repeat(np.arange(n_groups), sizes).astype(np.int64)

    def floats(k: int) -> np.ndarray:
        return np.asarray(draw(st.lists(FLOATS, min_size=k, max_size=k)), dtype=np.float64)

    def texts(k: int) -> np.ndarray:
        out = np.empty(k, dtype=object)
        out[:] = draw(st.lists(TEXTS, min_size=k, max_size=k))
        return out

    uid_keys = np.arange(n_groups) if draw(st.booleans()) else np.asarray([f"u{i}✓" for i in range(n_groups)], dtype=object)
    sources = np.empty(n_groups, dtype=object)
    sources[:] = draw(st.lists(SOURCE_NAMES, min_size=n_groups, max_size=n_groups))
    acc_values = st.sampled_from([0.0, 1.0, NAN, INF, 0.5])
    cols: dict[str, Any] = {
        B.UID: uid_keys[rep],
        B.INDEX: np.asarray(draw(st.lists(st.integers(0, 2**40), min_size=n_groups, max_size=n_groups)), np.int64)[rep],
        B.DATA_SOURCE: sources[rep],
        B.COMPLEXITY: floats(n_groups)[rep],
        B.REWARD: floats(n),
        B.FINAL_REWARD: floats(n),
        "acc": np.asarray(draw(st.lists(acc_values, min_size=n, max_size=n)), dtype=np.float64),
        "reward_fn/check_answer": floats(n),
        "reward_fn/format_exact": floats(n),
        B.ADVANTAGE: floats(n),
        B.RESPONSE_LENGTH: np.asarray(draw(st.lists(st.integers(0, 10**6), min_size=n, max_size=n)), np.int64),
        B.PROMPT: texts(n_groups)[rep],
        B.RESPONSE: texts(n),
        B.TARGET: texts(n_groups)[rep],
    }
    dropped = frozenset(draw(st.sets(st.sampled_from(DROPPABLE), max_size=4))) if draw(st.booleans()) else frozenset()
    lazy_names = [c for c in (B.PROMPT, B.TARGET) if draw(st.booleans())]  # lazily produced text columns
    lazy = {c: _constant(cols.pop(c)) for c in lazy_names}
    cols = {k: v for k, v in cols.items() if k not in dropped}
    lazy = {k: v for k, v in lazy.items() if k not in dropped}
    meta = {"n": max(sizes, default=1), "reward_functions": ["check_answer", "format_exact"],
            "reward_extra_keys": ["acc"]}  # meta may name columns the batch lacks
    return rlhooks.Batch(cols, lazy=lazy, meta=meta, length=n), dropped


ENGINE_METRICS = st.dictionaries(
    st.sampled_from(["actor/ppo_kl", "actor/entropy", "actor/kl_loss", "critic/score/mean", "timing/step_s",
                     "weird/ünï/🚀", "x" * 300]),
    st.one_of(FLOATS, st.integers(-2**62, 2**62), st.booleans()),
    max_size=5,
)


class Backends:
    """Every built-in backend, called directly (synchronously) so any exception surfaces here."""

    def __init__(self, run: Any) -> None:
        self.all = [ConsoleBackend(ConsoleBackend.Options(histograms=True, max_text=50)), JsonlBackend(),
                    TensorBoardBackend(), WandbBackend(WandbBackend.Options(mode="disabled"))]
        self.jsonl = self.all[1]
        for b in self.all:
            if hasattr(b, "on_run_start"):
                b.on_run_start(run)
        self.metric_calls = self.table_calls = 0

    def log(self, step: int, metrics: dict, emitted: list) -> None:
        for b in self.all:
            b.log_metrics(step, metrics)
        self.metric_calls += 1
        for hook, s, name, payload in emitted:
            for b in self.all:
                if hook == "log_table":
                    b.log_table(s, name, payload)
                else:
                    b.log_histogram(s, name, payload)
            self.table_calls += hook == "log_table"

    def end(self) -> None:
        for b in self.all:
            b.on_run_end("success")


def _each(m: rlhooks.host.RunManager, hook: str, kwargs: dict, failures: list[PluginError]) -> dict[str, Any]:
    """Every implementation of ``hook`` called on its own (as RunManager.call does), so one plugin's
    failure does not hide the next one's; failures are wrapped as the manager wraps them."""
    merged: dict[str, Any] = {}
    for rec, fn, argnames in m._impls(hook):
        try:
            result = fn(*[kwargs[a] for a in argnames])
            if result is not None:
                merge_metrics(merged, result)  # a flat dict of numbers, or TypeError
        except Exception as exc:  # noqa: BLE001 - judged below
            failures.append(PluginError(rec.name, hook, exc, rec.distribution))
    return merged


def _check_failures(failures: list[PluginError], dropped: frozenset[str], names: set[str]) -> None:
    for f in failures:
        assert dropped, f"a batch with every column failed: {f}"
        assert f.plugin in names and str(f).startswith(f"plugin {f.plugin!r}")
        # a deliberate error that says which column is missing, not a bare KeyError('reward')
        assert "column" in str(f.error), f"not a clear missing-column error: {f}"
        assert any(re.search(rf"(?<![\w/]){re.escape(c)}(?![\w/])", str(f.error)) for c in dropped), f"names no missing column: {f}"


@pytest.mark.parametrize("sampler", list(SAMPLERS))
def test_random_batches_through_every_builtin_plugin(sampler: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    m = rlhooks.host.RunManager(_config(tmp_path, SAMPLERS[sampler]), run_dir=tmp_path / "run")
    data = make_dataset(60, SOURCES, seed=1)
    smp = m.build_sampler(data, batch_size=8, seed=0)
    names = {rec.name for rec in m.components}
    m.start()
    backends = Backends(m.context)
    state: dict[str, Any] = {"step": 0, "complete": 0}

    def step_through(batch: rlhooks.Batch, dropped: frozenset[str], engine: dict) -> list[PluginError]:
        state["step"] += 1
        step = state["step"]
        m._emitted.clear()
        m.context.step = step
        failures: list[PluginError] = []
        metrics = dict(engine)
        metrics.update(_each(m, "on_rewards_computed", {"step": step, "batch": batch.with_meta(step=step)}, failures))
        try:
            keep, fm = m.apply_filters(batch)  # the manager checks the mask's shape and group consistency
            metrics.update(fm)
        except PluginError as exc:
            failures.append(exc)
            keep = np.ones(len(batch), dtype=bool)
        trained = batch.select(keep)
        metrics.update(_each(m, "on_step_end", {"step": step, "batch": trained, "metrics": dict(metrics)}, failures))
        _check_failures(failures, dropped, names)
        backends.log(step, metrics, list(m._emitted))
        return failures

    # a fixed batch without the columns the plugins need: each needing plugin fails clearly, on its own
    lacking = (B.REWARD, B.UID, B.DATA_SOURCE)
    full = make_trajectory_batch(4, 3, seed=2, sources=SOURCES, lazy_text=False)
    failures = step_through(rlhooks.Batch({c: full[c] for c in full.columns if c not in lacking}, meta=full.meta),
                            frozenset(lacking), {})
    assert {f.plugin for f in failures} >= {sampler, "dapo", "source_metrics", "top_bottom_k", "per_source_samples"}

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(drawn=trajectory_batches(), engine=ENGINE_METRICS)
    def one_step(drawn: tuple[rlhooks.Batch, frozenset[str]], engine: dict) -> None:
        batch, dropped = drawn
        state["complete"] += not dropped
        step_through(batch, dropped, engine)
        m._emitted.clear()
        w = np.asarray(list(smp.weights.values()))
        assert np.all(np.isfinite(w)) and np.all(w >= 0) and math.isclose(w.sum(), 1.0), smp.weights
        idx = smp.draw_batch()
        assert len(idx) == 8 and idx.min() >= 0 and idx.max() < len(data)

    with structlog.testing.capture_logs():  # the curricula log every level-up; keep the output short
        one_step()
    backends.end()
    capsys.readouterr()
    assert state["complete"] >= 5  # the generator really produced complete batches
    lines = read_jsonl(backends.jsonl.path)
    assert sum(r["kind"] == "metrics" for r in lines) == backends.metric_calls
    assert sum(r["kind"] == "table" for r in lines) == backends.table_calls


@settings(max_examples=60, deadline=None)
@given(response=st.one_of(TEXTS, st.none(), st.integers(), st.floats(), st.binary(max_size=8)),
       target=st.one_of(TEXTS, st.integers(), st.floats(), st.none()))
@pytest.mark.slow  # make test's 5-minute budget (CI runs slow tests)
def test_reward_functions_on_random_text(response: Any, target: Any) -> None:
    """A str response scores inside the function's declared range; another type is a TypeError
    saying which argument, which the reward pipeline turns into error_score with a count."""
    for name, fn in BUILTIN_FUNCTIONS.items():
        try:
            value = fn(response, target)
        except TypeError as exc:
            assert not isinstance(response, str) or not isinstance(target, (str, int, float)) or target is None
            assert re.match(r"(response|target) must be a string", str(exc)), exc
            continue
        lo, hi = fn.reward_range
        assert isinstance(value, float) and lo <= value <= hi, (name, value)
    pipeline = RewardPipeline.from_components(
        rlhooks.host.load_config({"rewards": [*REWARD_FNS]}).rewards
    )
    with structlog.testing.capture_logs():
        result = pipeline.score([response, "<reasoning>r</reasoning><answer>1</answer>"], [target, "1"])
    assert np.all(np.isfinite(result.total)) and result.total.shape == (2,)
    assert result.components["check_answer"][1] == 3.0  # a bad row does not spoil the next one
    assert set(result.errors) <= set(REWARD_FNS)


TAGS = st.sampled_from(["<reasoning>", "</reasoning>", "<answer>", "</answer>", " ", "\n", "\u00a0", "a", "1", "-2.5",
                        ",", "<answer", "</reasoning", "x y", ""])

#: the original, backtracking definition of a well-formed response (the reference for the linear parser)
_REFERENCE_FORMAT = re.compile(
    r"\A\s*<reasoning>(.+?)</reasoning>(?:(?!<answer>).)*?<answer>((?:(?!</?answer>).)+)</answer>\s*\Z", re.DOTALL
)


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.one_of(TAGS, st.text(max_size=3)), max_size=12))
def test_linear_answer_parser_matches_the_reference_regex(parts: list[str]) -> None:
    text = "".join(parts)
    m = _REFERENCE_FORMAT.match(text)
    want = m.group(2) if m and m.group(1).strip() and m.group(2).strip() else None
    assert extract_answer(text) == want
