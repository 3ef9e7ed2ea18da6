"""The hook contract: every hook rlhooks calls, when it fires, its arguments and its return.

Plugins implement a subset of these with ``@rlhooks.hookimpl`` and may accept any subset of
each hook's arguments (pluggy passes only the names an implementation asks for), which lets
the contract grow without breaking plugins.

Shared rules for every hook:

* ``batch`` is a :class:`rlhooks.Batch`. Treat it as read-only: never write into its columns
  (``batch["reward"][:] = ...``) nor into ``batch.meta``. Derive new data instead
  (``batch.with_columns(...)`` returns a new batch). The contract-test kit checks this.
* A hook that returns metrics returns ``None`` or a flat ``dict[str, float | int]``; keys are
  metric names such as ``source/<name>/count`` (see the metric-name reference, docs/reference/metrics.md).
  Values must be plain numbers (Python or numpy scalars); they are merged into the step's metrics.
* Tables and histograms are not returned: emit them with ``run.log_table(...)`` /
  ``run.log_histogram(...)`` on the :class:`RunContext` received in ``on_run_start``.
* Exceptions: observers (metrics, logging) are isolated per plugin; steering components
  (samplers, filters) abort the step. See ``on_error`` in the config reference (docs/reference/config.md).
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any, Mapping

import pluggy

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pathlib import Path

    import numpy as np

    from rlhooks.core.batch import Batch
    from rlhooks.core.run import RunContext

PROJECT = "rlhooks"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class RLHookSpecs:
    """Namespace of hook specifications, registered with ``PluginManager.add_hookspecs``."""

    @hookspec
    def on_run_start(self, run: RunContext) -> None:
        """Fires once, before the first step, after every component has been built.

        Arguments:
            run (RunContext): the run's resolved config (``run.config``, secrets NOT redacted;
                use ``run.redacted_config()`` to print or upload it), run directory
                (``run.run_dir``, a ``pathlib.Path`` that exists), seed (``run.seed``), run name
                (``run.name``) and the emitters ``run.log_table`` / ``run.log_histogram``.

        Returns: None (a returned value is ignored).

        Must not mutate: ``run.config``.
        """

    @hookspec
    def on_batch_sampled(self, step: int, batch: Batch) -> dict[str, float] | None:
        """Fires when a generation batch of prompts was drawn from the sampler, before generation.

        With dynamic sampling (DAPO) it fires once per generation batch, so several times per step.

        Arguments:
            step (int): the training step the batch belongs to (1-based).
            batch (Batch): one row per prompt. Columns always present: ``index`` (int64 dataset
                row), ``data_source`` (str). Often present: ``complexity`` (float), ``prompt``
                (lazy str), ``target`` (lazy str). ``batch.meta["generation"]`` is the 1-based
                generation-batch number within the step.

        Returns: None or a metrics dict. When a step has several generation batches and a key is
        returned more than once, the last value wins; a plugin that wants a per-step total
        accumulates it itself and returns it from ``on_step_end``.

        Must not mutate: ``batch`` (columns or meta).
        """

    @hookspec
    def on_rewards_computed(self, step: int, batch: Batch) -> dict[str, float] | None:
        """Fires when rewards exist for a generation batch, BEFORE any filter runs.

        Samplers (adaptive weights, reward curricula) read the rewards of every generated group
        here; DAPO filtering afterwards would bias them. Fires once per generation batch.

        Arguments:
            step (int): the training step (1-based).
            batch (Batch): one row per trajectory (``n`` rows per prompt, same ``uid``, rows of
                a group contiguous). Columns always present: ``uid``, ``index``, ``data_source``,
                ``reward`` (float sequence reward = sum of token-level scores). Often present:
                ``final_reward`` (after KL penalty), reward extras listed in
                ``batch.meta["reward_extra_keys"]`` (e.g. ``acc``, ``score``), per-function reward
                components ``reward_fn/<name>`` (listed in ``batch.meta["reward_functions"]``),
                ``response_length``, ``prompt_length``, ``complexity``, lazy text ``prompt``,
                ``response``, ``target``. ``batch.meta["generation"]`` as in on_batch_sampled.

        Returns: None or a metrics dict.

        Must not mutate: ``batch``.
        """

    @hookspec
    def on_step_end(
        self, step: int, batch: Batch, metrics: Mapping[str, float]
    ) -> dict[str, float] | None:
        """Fires after the training update of a step finished, before its metrics are logged.

        Arguments:
            step (int): the training step (1-based).
            batch (Batch): the trajectory rows that trained (after filtering and trimming), with
                ``advantage`` when the engine computed it.
            metrics (Mapping[str, float]): the step's metrics so far (engine metrics such as
                ``actor/ppo_kl``, ``actor/entropy``, timing, plus what hooks returned earlier in
                the step, including the ``on_step_end`` implementations called before this one;
                use ``@hookimpl(trylast=True)`` to see all of them). Read-only view.

        Returns: None or a metrics dict, merged into the step's metrics.

        Must not mutate: ``batch``, ``metrics``.
        """

    @hookspec
    def on_validation_end(
        self, step: int, metrics: Mapping[str, float], per_source: Mapping[str, Mapping[str, float]]
    ) -> dict[str, float] | None:
        """Fires after the engine validated the policy on held-out data (Lightning's ``on_validation_end``).

        verl validates every ``trainer.test_freq`` steps (and at step 0 with
        ``trainer.val_before_train``, right after ``on_run_start``); the simulator every
        ``simulate.test_freq`` steps over its held-out evaluation items. It fires within the step,
        after the update and before ``on_step_end``, so a sampler or curriculum acts on held-out
        accuracy for the next step. The latest results also stay on ``run.validation``.

        Arguments:
            step (int): the step that was validated (0: before training).
            metrics (Mapping[str, float]): the engine's validation metrics as it logs them (verl's
                ``val-core/<source>/<var>/<metric>`` and ``val-aux/...`` keys). Read-only view.
            per_source (Mapping[str, Mapping[str, float]]): the same per data source:
                ``per_source[source]["score"]`` is the headline (verl's core metric: the mean of
                ``acc``, else of the reward, over ``n`` validation samples; the simulator's expected
                accuracy), and ``"<var>/<metric>"`` every metric verl computed for that source, e.g.
                ``"acc/mean@1"``, ``"reward/mean@4"``, ``"acc/maj@4/mean"``. Read-only.

        Returns: None or a metrics dict, merged into the step's metrics (at step 0, logged with
        verl's initial validation metrics).

        Must not mutate: ``metrics``, ``per_source``.
        """

    @hookspec
    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        """Fires once per step with all of the step's merged metrics (backends write them out).

        Arguments:
            step (int): the training step (1-based); backends must log with this explicit step.
            metrics (Mapping[str, float]): flat, final metric values for the step (read-only).

        Returns: None.

        Must not mutate: ``metrics``. Runs on a backend's background thread when dispatched
        through the backend queue, so an implementation must not touch training state.
        """

    @hookspec
    def log_table(self, step: int, name: str, rows: list[dict[str, Any]]) -> None:
        """Fires when a table is ready, e.g. the top/bottom-k samples of a step.

        Arguments:
            step (int): the training step the rows belong to.
            name (str): table name such as ``samples/top_bottom_k``.
            rows (list[dict[str, Any]]): one dict per row; values are str, int, float, bool or
                None. Rows of one table may not all have the same keys.

        Returns: None.

        Must not mutate: ``rows`` or the dicts in it.
        """

    @hookspec
    def log_histogram(self, step: int, name: str, values: np.ndarray) -> None:
        """Fires when a distribution is ready (e.g. ``rewards/distribution``); optional for backends.

        Arguments:
            step (int): the training step.
            name (str): metric-style name of the distribution.
            values (numpy.ndarray): 1-D float array of finite values.

        Returns: None.

        Must not mutate: ``values``.
        """

    @hookspec
    def on_save_checkpoint(self, step: int, checkpoint_dir: Path) -> None:
        """Fires after the engine saved a checkpoint (Lightning's ``on_save_checkpoint``).

        Every component's ``state_dict()`` (samplers, filters, hook plugins, backends) is already in
        it: verl's ``global_step_<N>/rlhooks.pt``, the simulator's ``checkpoint/state.pkl``. A plugin
        that keeps state beyond a small picklable dict (an index, a model) writes its own files
        into ``checkpoint_dir`` here and reads them back in ``on_load_checkpoint``.

        Arguments:
            step (int): the step the checkpoint holds (training resumes at ``step + 1``).
            checkpoint_dir (pathlib.Path): the checkpoint's directory (exists; verl's
                ``global_step_<N>`` folder, the simulator's ``<run_dir>/checkpoint``).

        Returns: None.

        Must not mutate: files in ``checkpoint_dir`` that the plugin did not write.
        """

    @hookspec
    def on_load_checkpoint(self, step: int, checkpoint_dir: Path) -> None:
        """Fires on a resumed run, once every component's ``load_state_dict()`` restored its state.

        It fires before ``on_run_start`` (as Lightning's does before fitting): the plugin's saved
        state is back before the run starts, so e.g. the W&B backend continues its W&B run.

        Arguments:
            step (int): the step the checkpoint holds (training resumes at ``step + 1``).
            checkpoint_dir (pathlib.Path): the checkpoint's directory (as in ``on_save_checkpoint``).

        Returns: None.

        Must not mutate: the checkpoint's files.
        """

    @hookspec
    def on_run_end(self, status: str) -> None:
        """Fires once at the end of a run, also after a failure, an interrupt or a requested stop.

        Backends flush and close here. Every metric logged before this call must be written.

        Arguments:
            status (str): ``"success"``, ``"stopped"`` (a plugin called ``run.request_stop(reason)``;
                the reason is ``run.stop_reason``), ``"failed"`` or ``"interrupted"``.

        Returns: None.

        Must not mutate: nothing is passed that could be mutated.
        """


#: Hook names, in the order they fire in a run.
HOOK_NAMES: tuple[str, ...] = (
    "on_load_checkpoint",
    "on_run_start",
    "on_batch_sampled",
    "on_rewards_computed",
    "on_validation_end",
    "on_step_end",
    "log_metrics",
    "log_table",
    "log_histogram",
    "on_save_checkpoint",
    "on_run_end",
)

#: Hooks that only observe; their failures are isolated per plugin by default.
OBSERVER_HOOKS = frozenset({"log_metrics", "log_table", "log_histogram", "on_run_start", "on_run_end"})
#: Hooks whose results (metrics dicts) are merged into the step's metrics.
METRIC_HOOKS = frozenset({"on_batch_sampled", "on_rewards_computed", "on_validation_end", "on_step_end"})


def undecorated_hook_methods(obj: Any) -> list[tuple[str, str]]:
    """``(method, hook)`` for public methods named like a hook, or a near-miss spelling of one,
    that are not decorated with @hookimpl (pluggy never calls them). One rule for run time
    (RunManager warns) and the contract kit (a failing check).

    A near miss of a hook the object does implement (``log_metric`` beside a decorated
    ``log_metrics``) is taken for a helper, not a misspelling.
    """
    marker = PROJECT + "_impl"
    implemented: set[str] = set()
    candidates: list[tuple[str, str]] = []
    for attr in dir(obj):
        if attr.startswith("_"):
            continue
        close = difflib.get_close_matches(attr, HOOK_NAMES, n=1, cutoff=0.85)
        if not close:
            continue
        try:
            value = getattr(obj, attr)
        except Exception:  # noqa: BLE001 - a property may raise before the run starts
            continue
        if not callable(value):
            continue
        opts = getattr(value, marker, None)
        if isinstance(opts, dict):
            implemented.add(opts.get("specname") or attr)
        else:
            candidates.append((attr, close[0]))
    return [(attr, hook) for attr, hook in candidates if attr == hook or hook not in implemented]
