"""The simulated engine: core's StepDriver and every configured plugin, a simulated learner instead of a model.

One step::

    [core StepDriver.collect: sample (sampler or uniform) -> on_batch_sampled -> generate n responses
    per prompt (learner) -> reward functions -> on_rewards_computed -> filters / accumulate]
    -> GRPO advantages on the trained rows -> learner update -> engine metrics
    -> [core StepDriver.finish_step: on_step_end -> log_metrics / log_table]

The engine is a ``core.driver.Rollout`` whose engine objects are Batches: the prompt Batch until
generation, then the trajectory Batch. Its own reward is the verifier's accuracy (``acc``), which
configured reward functions replace (the driver scores them).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import structlog

from rlhooks.core.batch import Batch
from rlhooks.core.config import Config, load_config
from rlhooks.engines.verl.config import VERL_SECTION, apply_verl_section
from rlhooks.core.driver import StepDriver
from rlhooks.core.errors import RLHooksError
from rlhooks.core.manager import RunManager
from rlhooks.core.registry import Registry
from rlhooks.engines.sim.data import SOURCE_PROFILES, SimDataset, write_dataset
from rlhooks.engines.sim.learner import (
    NO_ANSWER_TAGS,
    NO_REASONING_TAGS,
    SHORTCUT,
    UNCLOSED_ANSWER,
    WELL_FORMED,
    LearnerOptions,
    SimLearner,
)

log = structlog.get_logger("rlhooks.sim")

GRPO_EPS = 1e-6
#: wrong answers to a numeric question: near misses (which check_answer gives partial credit) and slips
_WRONG_DELTAS = np.array([-10, -2, -1, 1, 1, 2, 10, 100])


@attrs.frozen(kw_only=True)
class SimOptions:
    """The ``simulate:`` section of a config: data and learner of the simulated engine."""

    #: a parquet file in verl's layout; empty = generate the built-in multi-source dataset
    data: str = ""
    #: rows per built-in source when generating
    rows_per_source: int = attrs.field(default=500, validator=[attrs.validators.gt(0), attrs.validators.le(1_000_000)])
    #: built-in sources to generate (see SOURCE_PROFILES)
    sources: tuple[str, ...] = attrs.field(default=tuple(SOURCE_PROFILES))
    #: seed of the generated data (kept apart from run.seed so seeds compare on the same data)
    data_seed: int = attrs.field(default=0, validator=[attrs.validators.ge(0), attrs.validators.le(2**32 - 1)])
    #: accuracy a source must reach for "steps to target" in summaries and comparisons
    target_accuracy: float = attrs.field(default=0.8, validator=[attrs.validators.gt(0), attrs.validators.le(1)])
    #: items per source used to measure sim/accuracy (a fixed random subset; all when fewer)
    eval_items: int = attrs.field(default=2048, validator=[attrs.validators.gt(0), attrs.validators.le(10_000_000)])
    #: longest response in tokens (~4 characters each), as verl's `data.max_response_length`: a
    #: rollout stops there, so an answer longer than that is never written in full (and is wrong)
    max_response_length: int = attrs.field(default=1024, validator=[attrs.validators.gt(0),
                                                                     attrs.validators.le(1_000_000)])
    learner: LearnerOptions = attrs.field(factory=LearnerOptions)

    @sources.validator
    def _check_sources(self, _attr: Any, value: tuple[str, ...]) -> None:
        unknown = [s for s in value if s not in SOURCE_PROFILES]
        if unknown:
            raise ValueError(f"unknown source(s) {unknown}; built-in sources: {', '.join(SOURCE_PROFILES)}")
        if not value:
            raise ValueError("needs at least one source")


#: how the simulator (and ``rlhooks config check``) reads a config's engine sections: ``simulate:``
#: structured into SimOptions; ``verl:`` accepted, its keys that rlhooks takes from verl (batch sizes,
#: n, steps, seed, name, dynamic sampling) meaning what they mean to ``rlhooks train``
SIM_SECTIONS: dict[str, Any] = {"extra_sections": {"simulate": SimOptions}, "passthrough": (VERL_SECTION,),
                                "prepare": apply_verl_section}


def load_sim_config(source: Any = None, overrides: list[str] | tuple[str, ...] = (), registry: Registry | None = None) -> Config:
    """A config with its ``simulate:`` section structured into SimOptions (and ``verl:`` mapped)."""
    return load_config(source, overrides=overrides, registry=registry, default_plugins=True, **SIM_SECTIONS)


def sim_options(config: Config) -> SimOptions:
    opts = config.extra.get("simulate")
    return opts if isinstance(opts, SimOptions) else SimOptions()


def prepare_data(options: SimOptions, run_dir: Path, data: str | Path | None = None) -> SimDataset:
    """The user's parquet (``data`` or ``simulate.data``), else the generated set written to run_dir/data.parquet."""
    path = data or options.data
    if path:
        return SimDataset.from_parquet(path)
    out = write_dataset(Path(run_dir) / "data.parquet", options.rows_per_source, options.data_seed, options.sources)
    return SimDataset.from_parquet(out)


def grpo_advantage(reward: np.ndarray, batch: Batch) -> np.ndarray:
    """(reward - group mean) / (group std + eps), std unbiased as in verl's GRPO; singletons get 0."""
    g = batch.groups
    r = np.asarray(reward, dtype=np.float64)
    mean = g.mean(r)
    sizes = g.sizes.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        std = g.std(r) * np.sqrt(sizes / np.maximum(sizes - 1, 1))
    adv = (r - mean[g.codes]) / (std[g.codes] + GRPO_EPS)
    adv[(g.sizes == 1)[g.codes]] = 0.0
    return adv


class SimEngine:
    """Drives a run of ``config`` on ``data`` with the simulated learner (also usable step by step)."""

    def __init__(
        self,
        config: Config,
        data: SimDataset,
        *,
        manager: RunManager | None = None,
        run_dir: str | Path | None = None,
        registry: Registry | None = None,
    ) -> None:
        self.config = config
        self.options = sim_options(config)
        self.data = data
        self.manager = manager if manager is not None else RunManager(config, registry=registry, run_dir=run_dir)
        run = config.run
        self.n = run.n
        self.gen_batch_size = min(run.effective_gen_batch_size, len(data))
        self.rng = np.random.default_rng([run.seed, 7])  # responses and engine noise
        # prompts when no sampler is configured: verl's dataloader, a new shuffle each epoch (RandomSampler)
        # in batches of gen_batch_size with the epoch's last partial batch dropped (drop_last=True)
        self.uniform_epoch = 0
        self.uniform_pos = 0
        self._uniform_order: np.ndarray | None = None
        self.learner = SimLearner(self.options.learner, data.source_names)
        self.sampler = self.manager.build_sampler(data.columns, batch_size=self.gen_batch_size, seed=run.seed)
        self._sampler_iter: Any = None
        self.driver = StepDriver(self.manager)
        self.step = 0
        self.uid_next = 0
        self.generated_trajectories = 0
        self.trained_trajectories = 0
        self.reached: dict[str, int | None] = {s: None for s in data.source_names}
        #: trajectories generated until sim/accuracy/mean first reached the target (None: not yet)
        self.generated_to_target: int | None = None
        self.steps_to_target: int | None = None
        self.last_metrics: dict[str, float] = {}
        self._gen_s = 0.0
        self._source_obj = np.asarray(data.source_names, dtype=object)
        comp = data.columns.complexity
        self._complexity = comp if comp is not None else np.full(len(data), np.nan, np.float32)
        self._answer_head = _answer_heads(data.solution)
        self._item_offset = self.learner.item_offsets(data.difficulty, self.options.data_seed)
        self._eval = self._eval_subset()
        nb = self.options.learner.buckets
        # each source's share of items per difficulty bucket: skill is mastery where its items are
        self._bucket_share = np.stack([
            np.bincount(self.learner.bucket(data.difficulty[rows]), minlength=nb) / max(len(rows), 1) for rows in self._eval
        ])
        self._max_chars = 4 * self.options.max_response_length  # response_length counts ~4 chars a token
        self._prompt_len = np.fromiter(map(len, data.prompt.tolist()), np.int64, len(data)) // 4 + 1

    # -- helpers ------------------------------------------------------------------------
    def _eval_subset(self) -> list[np.ndarray]:
        rng = np.random.default_rng([self.options.data_seed, 3])
        out = []
        codes = self.data.source_codes
        for s in range(len(self.data.source_names)):
            rows = np.flatnonzero(codes == s)
            if len(rows) > self.options.eval_items:
                rows = np.sort(rng.choice(rows, self.options.eval_items, replace=False))
            out.append(rows)
        return out

    def accuracy(self) -> dict[str, float]:
        """Expected accuracy per source over its evaluation items (right answer, well formed)."""
        out = {}
        for s, rows in enumerate(self._eval):
            if not len(rows):
                continue
            p = self.learner.p_correct(np.full(len(rows), s), self.data.difficulty[rows], self._item_offset[rows])
            out[self.data.source_names[s]] = self.learner.expected_accuracy(s, p)
        return out

    def skill(self, source: int, mastery: np.ndarray | None = None) -> float:
        """0..1: P(solve) at the difficulty-bucket centres, weighted by where the source's items are."""
        mastery = self.learner.mastery() if mastery is None else mastery
        return float(mastery[source] @ self._bucket_share[source])

    # -- Rollout -------------------------------------------------------------------------
    def _draw(self) -> np.ndarray:
        want = self.gen_batch_size
        if self.sampler is None:
            return self._draw_uniform(want)
        got: list[int] = []
        fresh = False
        while len(got) < want:
            if self._sampler_iter is None:
                self._sampler_iter = iter(self.sampler)
                fresh = True
            chunk = list(itertools.islice(self._sampler_iter, want - len(got)))
            got.extend(chunk)
            if len(got) < want:  # epoch ended: torch samplers stop; start the next epoch
                if fresh and not chunk:
                    raise RLHooksError(f"sampler {self.config.sampler.name!r} yielded no indices; is the dataset empty?")
                self._sampler_iter = None
        idx = np.asarray(got, dtype=np.int64)
        bad = (idx < 0) | (idx >= len(self.data))
        if bad.any():
            raise RLHooksError(
                f"sampler {self.config.sampler.name!r} yielded index {int(idx[bad][0])}, outside the dataset's "
                f"{len(self.data)} rows ({self.data.origin})"
            )
        return idx

    def _epoch_order(self, epoch: int) -> np.ndarray:
        """The shuffled row order of a uniform epoch (a function of seed and epoch, so resuming needs no array)."""
        return np.random.default_rng([self.config.run.seed, 11, epoch]).permutation(len(self.data))

    def _draw_uniform(self, want: int) -> np.ndarray:
        if self._uniform_order is None:
            self._uniform_order = self._epoch_order(self.uniform_epoch)
        if self.uniform_pos + want > len(self._uniform_order):  # drop_last: the epoch's remainder is not drawn
            self.uniform_epoch += 1
            self.uniform_pos = 0
            self._uniform_order = self._epoch_order(self.uniform_epoch)
        idx = self._uniform_order[self.uniform_pos:self.uniform_pos + want]
        self.uniform_pos += want
        return idx

    def sample(self, step: int) -> tuple[Batch, Batch]:
        idx = self._draw()
        prompts = self.data.prompt
        batch = Batch(
            {"index": idx, "data_source": self._source_obj[self.data.source_codes[idx]], "complexity": self._complexity[idx]},
            lazy={"prompt": lambda: prompts[idx], "target": lambda: self.data.target[idx]},
            meta={"n": self.n},
        )
        return batch, batch

    def select_prompts(self, payload: Batch, rows: np.ndarray) -> Batch:
        return payload.select(rows)

    def generate(self, step: int, payload: Batch) -> tuple[Batch, Batch]:
        t0 = time.perf_counter()
        idx = payload["index"]
        p = len(idx)
        rows = np.repeat(idx, self.n)
        uid = np.repeat(np.arange(self.uid_next, self.uid_next + p, dtype=np.int64), self.n)
        self.uid_next += p
        src = self.data.source_codes[rows].astype(np.int64)
        correct, kind = self.learner.respond(src, self.data.difficulty[rows], self.rng, self._item_offset[rows])
        target = self.data.target[rows]
        answer = np.where(correct, target, self._wrong_answers(rows))
        answer, _ = _cut(answer, self._max_chars)  # bounds the rendering's cost too
        response, cut = _cut(_render(self._answer_head[rows], answer, kind), self._max_chars)
        acc = ((answer == target) & ((kind == WELL_FORMED) | (kind == SHORTCUT)) & ~cut).astype(np.float64)
        cols: dict[str, Any] = {
            "uid": uid,
            "sample_id": uid * self.n + np.tile(np.arange(self.n, dtype=np.int64), p),
            # synchronous: the weights of the previous step's update generate this step's responses
            "policy_version": np.full(len(rows), step - 1, dtype=np.int64),
            "index": rows,
            "data_source": self._source_obj[src],
            "complexity": self._complexity[rows],
        }
        cols["reward"] = acc.copy()  # the engine's own reward; configured reward functions replace it
        cols["acc"] = acc
        cols["response_length"] = np.fromiter(map(len, response.tolist()), np.int64, len(response)) // 4 + 1
        cols["prompt_length"] = self._prompt_len[rows]
        cols["response"] = response
        cols["target"] = target
        if self.learner.exploit.any():
            cols["sim_shortcut"] = kind == SHORTCUT  # what the learner took, for its update
        prompts = self.data.prompt
        batch = Batch(
            cols,
            lazy={"prompt": lambda: prompts[rows]},
            meta={"n": self.n, "reward_functions": (), "reward_extra_keys": ["acc"]},
        )
        self.generated_trajectories += len(rows)
        self._gen_s += time.perf_counter() - t0
        return batch, batch

    def place_rewards(self, payload: Batch, reward: np.ndarray) -> Batch:
        return payload.with_columns(reward=reward)

    def select(self, payload: Batch, rows: np.ndarray) -> Batch:
        return payload.select(rows)

    def concat(self, payloads: list[Batch]) -> Batch:
        return Batch.concat(payloads)

    def _wrong_answers(self, rows: np.ndarray) -> np.ndarray:
        """A plausible wrong answer per row: a near miss for numbers, another item's answer otherwise."""
        num = self.data.numeric_target[rows]
        delta = self.rng.choice(_WRONG_DELTAS, len(rows))
        other = self.data.target[self.rng.integers(0, len(self.data), len(rows))]
        is_num = np.isfinite(num)
        shifted = np.where(is_num, num + delta, 0.0)
        integral = is_num & (shifted == np.round(shifted))
        text = np.where(integral, shifted.astype(np.int64).astype(str), shifted.astype(str)).astype(object)
        return np.where(is_num, text, other)

    # -- a step ----------------------------------------------------------------------------
    def train_step(self, step: int) -> dict[str, float]:
        t0 = time.perf_counter()
        self._gen_s = 0.0
        collected = self.driver.collect(step, self)
        batch = collected.batch
        metrics = dict(collected.metrics)
        learn: dict[str, float] = {"sim/learning_signal": 0.0}
        if len(batch):
            adv = grpo_advantage(batch["reward"], batch)
            batch = batch.with_columns(advantage=adv)
            rows = batch["index"]
            shortcut = batch["sim_shortcut"] if "sim_shortcut" in batch else None
            learn = self.learner.update(self.data.source_codes[rows], self.data.difficulty[rows], adv, batch.groups, shortcut)
            self.trained_trajectories += len(batch)
        metrics.update(learn)
        metrics.update(self._engine_metrics(batch, learn))
        metrics["timing/gen_s"] = self._gen_s
        metrics["timing/step_s"] = time.perf_counter() - t0
        merged = self.driver.finish_step(step, batch, metrics)
        self.step = step
        self._track(step, merged)
        self.last_metrics = merged
        return merged

    def _engine_metrics(self, batch: Batch, learn: Mapping[str, float]) -> dict[str, float]:
        out: dict[str, float] = {}
        mastery = self.learner.mastery()
        noise = self.rng.normal(0.0, 1.0, 2)
        # plausible shapes: KL grows with how much the policy moved, entropy falls as skills are mastered
        out["actor/ppo_kl"] = float(0.001 + 0.02 * learn.get("sim/skill_gain", 0.0) + 0.0002 * abs(noise[0]))
        # KL to the reference (initial) policy grows with how far skills moved from their start
        drift = np.abs(self.learner.skill - self.learner.options.initial_skill).mean()
        out["actor/kl_loss"] = float(0.002 + 0.05 * drift)
        out["actor/entropy"] = float(0.35 + 0.9 * (1.0 - mastery.mean()) + 0.01 * noise[1])
        if len(batch):
            out["response_length/mean"] = float(batch["response_length"].mean())
            adv = batch["advantage"]
            out["critic/advantages/mean"] = float(adv.mean())
            out["critic/advantages/std"] = float(adv.std())
        acc = self.accuracy()
        for s, name in enumerate(self.learner.source_names):
            out[f"sim/skill/{name}"] = self.skill(s, mastery)
            out[f"sim/malformed_rate/{name}"] = float(self.learner.malformed[s])
            if self.learner.exploit.any():
                out[f"sim/shortcut_rate/{name}"] = float(self.learner.exploit[s])
            if name in acc:
                out[f"sim/accuracy/{name}"] = acc[name]
        if acc:
            out["sim/accuracy/mean"] = float(np.mean(list(acc.values())))
        out["sim/generated_trajectories"] = float(self.generated_trajectories)
        out["sim/trained_trajectories"] = float(self.trained_trajectories)
        return out

    def _track(self, step: int, merged: Mapping[str, float]) -> None:
        target = self.options.target_accuracy
        for name, first in self.reached.items():
            if first is None and merged.get(f"sim/accuracy/{name}", 0.0) >= target:
                self.reached[name] = step
        if self.generated_to_target is None and merged.get("sim/accuracy/mean", 0.0) >= target:
            self.generated_to_target = self.generated_trajectories
            self.steps_to_target = step

    def alert_details(self) -> dict[str, Any] | None:
        """The alert summary of a configured alert manager (the reward monitor's), if any."""
        for rec in self.manager.components:
            mgr = getattr(rec.obj, "alerts", None)
            if callable(getattr(mgr, "summary", None)):
                try:
                    return dict(mgr.summary())
                except Exception:  # noqa: BLE001 - a summary line is not worth failing the run
                    return None
        return None

    # -- a run -----------------------------------------------------------------------------
    def run(self, steps: int | None = None, progress: bool = False, on_step: Callable[[int, dict], None] | None = None) -> dict[str, float]:
        """Run UNTIL step ``steps`` (an absolute step number, default ``run.steps``), not ``steps`` more.

        Runs steps ``self.step + 1 .. steps``: ``run(10)`` after 4 steps runs 6 more, and once step 10
        is done runs none. Inside ``manager.running()`` (on_run_end fires on failure too).
        """
        total = steps if steps is not None else self.config.run.steps
        bar = None
        if progress:
            from tqdm import tqdm

            # disable=None: no bar when stderr is not a terminal (piped, redirected), as tqdm users expect
            bar = tqdm(total=total, initial=self.step, desc=self.config.run.name, unit="step", dynamic_ncols=True,
                       leave=True, disable=None)
        try:
            with self.manager.running():
                for step in range(self.step + 1, total + 1):
                    merged = self.train_step(step)
                    if on_step is not None:
                        on_step(step, merged)
                    if bar is not None:
                        bar.set_postfix(acc=f"{merged.get('sim/accuracy/mean', float('nan')):.3f}",
                                        gen=int(merged.get("train/num_gen_batches", 1)), refresh=False)
                        bar.update(1)
        finally:
            if bar is not None:
                bar.close()
        return self.last_metrics

    # -- state ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs to continue exactly as an uninterrupted one."""
        return {
            "version": 2,
            "step": self.step,
            "uid_next": self.uid_next,
            "rng": self.rng.bit_generator.state,
            "uniform_epoch": self.uniform_epoch,
            "uniform_pos": self.uniform_pos,
            "learner": self.learner.state_dict(),
            "generated_trajectories": self.generated_trajectories,
            "trained_trajectories": self.trained_trajectories,
            "reached": dict(self.reached),
            "generated_to_target": self.generated_to_target,
            "steps_to_target": self.steps_to_target,
            "manager": self.manager.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("version") != 2:
            raise RLHooksError(f"unsupported simulator state version {state.get('version')!r} (expected 2; a state from an older rlhooks cannot resume exactly)")
        self.learner.load_state_dict(state["learner"])
        self.step = int(state["step"])
        self.uid_next = int(state["uid_next"])
        self.rng.bit_generator.state = state["rng"]
        self.uniform_epoch = int(state["uniform_epoch"])
        self.uniform_pos = int(state["uniform_pos"])
        self._uniform_order = None
        self.generated_trajectories = int(state["generated_trajectories"])
        self.trained_trajectories = int(state["trained_trajectories"])
        self.reached = dict(state["reached"])
        self.generated_to_target = state.get("generated_to_target")
        self.steps_to_target = state.get("steps_to_target")
        self.manager.load_state_dict(state["manager"])
        self._sampler_iter = None  # the sampler continues from its restored position


#: what a shortcut response writes instead of its worked steps (claims_verified pays for it)
SHORTCUT_CLAIM = "Verified: I checked this answer and it is correct."


def _answer_heads(solution: np.ndarray) -> np.ndarray:
    """Worked steps up to the last '=' (the learner writes its own, maybe wrong, result after it)."""
    heads = [s.rpartition("=")[0] + "=" if "=" in s else s + ", so the result is" for s in solution.tolist()]
    return np.asarray(heads, dtype=object)


def _cut(text: np.ndarray, max_chars: int) -> tuple[np.ndarray, np.ndarray]:
    """Each string cut to max_chars, and which were cut (a Python loop over the long rows only)."""
    cut = np.fromiter(map(len, text.tolist()), np.int64, len(text)) > max_chars
    if not cut.any():
        return text, cut
    out = text.copy()
    out[cut] = [t[:max_chars] for t in text[cut].tolist()]
    return out, cut


def _render(head: np.ndarray, answer: np.ndarray, kind: np.ndarray) -> np.ndarray:
    """Response text per row from numpy-selected templates (object-array string concatenation)."""
    reasoning = head + " " + answer
    out = np.empty(len(answer), dtype=object)
    templates = {
        WELL_FORMED: lambda r, a: "<reasoning>\n" + r + "\n</reasoning>\n<answer>" + a + "</answer>",
        NO_ANSWER_TAGS: lambda r, a: "<reasoning>\n" + r + "\n</reasoning>\nThe answer is " + a + ".",
        NO_REASONING_TAGS: lambda r, a: "Let me think. " + r + "\n<answer>" + a + "</answer>",
        UNCLOSED_ANSWER: lambda r, a: "<reasoning>\n" + r + "\n</reasoning>\n<answer>" + a,
        SHORTCUT: lambda r, a: "<reasoning>\n" + SHORTCUT_CLAIM + "\n</reasoning>\n<answer>" + a + "</answer>",
    }
    for k, make in templates.items():
        m = kind == k
        if m.any():
            out[m] = make(reasoning[m], answer[m])
    return out
