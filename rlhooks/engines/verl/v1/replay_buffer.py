"""RLHooksReplayBuffer: verl's V1 sync ``ReplayBuffer`` whose evictions the rlhooks filters decide.

verl loads it as a custom sampler (``trainer.v1.sampler.custom_sampler.path =
pkg://rlhooks.engines.verl.v1.replay_buffer``, ``name = RLHooksReplayBuffer``) with the constructor
arguments verl gives every custom sampler. Its ``sample()`` is verl's: poll TransferQueue, evict terminal
groups, refill ``2k`` prompts for ``k`` evicted groups while fewer than ``train_batch_size`` groups are
sampleable, drain what is in flight, discard the surplus. One member is overridden:
``_dapo_filtered_keys``, where verl's built-in buffer applies ``algorithm.filter_groups``. Here each group
that finished since the last poll is read from TransferQueue once, as an rlhooks ``Batch`` (rows of a
group contiguous), and handed to the rlhooks trainer, which updates the learning state, fires
``on_rewards_computed`` (scored groups, before any filter) and applies the rlhooks filters; the groups they
drop are evicted and refilled exactly as verl evicts DAPO-filtered ones.

The buffer needs the rlhooks trainer (``trainer.v1.trainer_mode=rlhooks_sync``), which attaches itself;
validation batches (partition ``val``) pass through untouched, as in verl.

**Exact resume (and a reproducible run).** verl's sync ``sample()`` acts at each poll on the groups that
have finished by then: each evicted group adds 2 refill credits, refills go into the in-flight slots
freed so far, and draining starts the moment enough groups are kept; the surplus is whichever kept groups
a set of random ``uuid4`` uids lists last. So how many prompts a step draws from the dataloader (hence
every later step's prompts), which extra groups are generated while draining, which groups on_rewards_computed
sees together and which kept groups train all depend on when groups finish relative to the 2 s polls: a
straight run does not reproduce itself, and a resumed one cannot reproduce it. Here, in verl's sync mode
(with rlhooks filters or without: without, a poll's finished groups would still make one on_rewards_computed
call, so a step's feedback batches followed poll timing), finished groups are shown to verl's loop in *waves*: a group that finishes while
others of the step are still generating is reported as running until none is (:meth:`_sync_metadata_from_transfer_queue`),
so verl's eviction, 2k refill, draining and surplus rules act on whole waves, whose outcome generation
(seeded per request) decides, never timing. Groups are ordered by uid (the trainer's uids count the
prompts it draws), so judging, selection (oldest step, then first drawn) and the trained batch's row order
are the uninterrupted run's. Cost: refills wait for the slowest group of a wave instead of filling each
slot as it frees. What is judged is saved in ``rlhooks.pt`` (:meth:`judged_groups`), so a group that
TransferQueue's checkpoint brings back (verl's async modes) is never judged twice.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import numpy as np
import transfer_queue as tq
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

from rlhooks.core.errors import RLHooksError
from rlhooks.engines.verl.v1 import TRAINER_MODE
from rlhooks.engines.verl.v1.batches import ROW_KEY, field_values, objects, scored_batch, scored_fields

#: what verl's sample() sees as "DAPO enabled" when rlhooks filters run (any non-None metric name)
RLHOOKS_FILTERS = "rlhooks filters"
#: seconds between TransferQueue polls (``trainer.v1.sampler.sampler_kwargs.{min,max}_poll_interval``): the
#: first poll after a change comes after ``min``, and the wait grows by ``POLL_GROWTH`` while nothing changes, up
#: to ``max`` (verl's own fixed interval). verl's 2 s made a CPU-learner step mostly waiting (gen 8-12 s in whole
#: multiples of 2 s); growing keeps a long generation at a few polls a minute, as verl's
MIN_POLL_INTERVAL_S = 0.05
MAX_POLL_INTERVAL_S = 2.0
POLL_GROWTH = 1.5


def poll_bounds(sampler_kwargs: Any) -> tuple[float, float]:
    """``(min, max)`` poll interval from verl's ``sampler_kwargs`` (the custom sampler's own settings)."""
    kwargs = dict(sampler_kwargs or {})
    bounds = []
    for key, default in (("min_poll_interval", MIN_POLL_INTERVAL_S), ("max_poll_interval", MAX_POLL_INTERVAL_S)):
        value = kwargs.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise RLHooksError(f"trainer.v1.sampler.sampler_kwargs.{key} is {value!r}: the rlhooks replay buffer's "
                               "TransferQueue poll interval, in seconds, must be a number > 0")
        bounds.append(float(value))
    if bounds[0] > bounds[1]:
        raise RLHooksError(f"trainer.v1.sampler.sampler_kwargs.min_poll_interval ({bounds[0]}) is above "
                           f"max_poll_interval ({bounds[1]}): set min <= max")
    return bounds[0], bounds[1]


#: how long a rollout server may take to answer the ping after failed groups (a busy one is not dead)
SERVER_PING_S = 5.0


def raise_if_a_server_died(trainer: Any) -> None:
    """The ``ActorDiedError`` of a dead rollout server of ``trainer`` (verl's LLM server managers), if any."""
    import ray

    handles = [h for name in ("llm_server_manager", "standalone_server_manager")
               for h in getattr(getattr(trainer, name, None), "server_handles", None) or []]
    if not handles:
        return
    refs = [h.__ray_ready__.remote() for h in handles]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=SERVER_PING_S)
    for ref in ready:
        ray.get(ref)  # raises for a dead actor


def trajectory_key(key: str) -> tuple[str, int, int]:
    """Sort key of a TransferQueue trajectory key ``{uid}_{session}_{index}`` (a prompt key: its uid)."""
    uid, _, rest = key.partition("_")
    session, _, index = rest.partition("_")
    return uid, int(session or -1), int(index or -1)


class RLHooksReplayBuffer(ReplayBuffer):
    """verl's sync replay buffer; the rlhooks filters decide which finished groups are evicted."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        #: the rlhooks trainer (RLHooksPPOTrainerSync; not imported here: it imports this module)
        self.trainer: Any = None
        #: partition -> terminal groups verl's loop has been shown (waves, see the module docstring)
        self._released: dict[str, set[str]] = defaultdict(set)
        self.min_poll_interval, self.max_poll_interval = poll_bounds(self.sampler_kwargs)
        self.poll_interval = self.min_poll_interval  # verl sleeps this long between polls (adapted each poll)
        self._last_snapshot: tuple = ()
        #: partition -> stale groups reported to the trainer (async modes), each once until verl evicts it
        self._stale_reported: dict[str, set[str]] = defaultdict(set)
        self._failed_seen: set[str] = set()
        #: partition -> what was read of the groups judged (trajectory keys, batches.field_values): the step's
        #: end builds the trained rows from it instead of reading the fields again (every trained group was judged)
        self._judged_rows: dict[str, list[tuple[np.ndarray, dict[str, np.ndarray]]]] = defaultdict(list)
        #: prompt uid -> (dataset row, data_source) as the trainer dispatched it: not read from TransferQueue
        self._dispatched: dict[str, tuple[int, Any]] = {}
        self._dispatched_since: set[str] = set()  # dispatched since the last step's end (maybe not polled yet)

    def attach(self, trainer: Any, *, filters: bool, train_batch_size: int, gen_batch_size: int,
               max_inflight_gen_batches: int, sync_refill_failed_groups: bool = False) -> None:
        """Connect the rlhooks trainer. With rlhooks filters, verl's eviction-and-refill path is switched on
        with the sizes verl's own buffer gets for ``algorithm.filter_groups``; with
        ``trainer.v1.sampler.sync_refill_failed_groups`` failed groups are refilled, as in verl's buffer (verl
        passes both only to its built-in buffer, not to a custom sampler)."""
        self.trainer = trainer
        self.sync_refill_failed_groups = bool(sync_refill_failed_groups)
        if filters or self.sync_refill_failed_groups:
            self.train_batch_size = int(train_batch_size)
            self.gen_batch_size = int(gen_batch_size)
        if filters:
            self.filter_groups_metric = RLHOOKS_FILTERS
            self.max_inflight_gen_batches = int(max_inflight_gen_batches)
        if filters or self.sync_refill_failed_groups:
            self._validate_mode_config()

    def sample(self, global_steps: int, partition_id: str, batch_size: int):
        if partition_id != "val" and self.trainer is None:
            raise RLHooksError(
                f"RLHooksReplayBuffer (trainer.v1.sampler.custom_sampler) runs the rlhooks filters for the rlhooks "
                f"trainer, which was not started: set trainer.v1.trainer_mode={TRAINER_MODE} (rlhooks train does when "
                f"it is unset), or remove trainer.v1.sampler.custom_sampler to use verl's own replay buffer"
            )
        return super().sample(global_steps=global_steps, partition_id=partition_id, batch_size=batch_size)

    @property
    def judges_in_waves(self) -> bool:
        """verl's sync sampling under the rlhooks trainer, with or without rlhooks filters: with filters, the
        eviction-and-refill loop's decisions depend on when groups finish; without, which groups one
        on_rewards_computed call sees would (one call per poll that finds any finished, so a curriculum counted
        in feedback batches would advance with poll timing). Module docstring."""
        return self.trainer is not None and self.trainer_mode == "sync"

    def _sync_metadata_from_transfer_queue(self):
        """verl's snapshot of TransferQueue; in waves, groups that finished while others are still in flight
        stay "running" for verl's loop until the whole wave has finished."""
        super()._sync_metadata_from_transfer_queue()
        self._check_rollout_servers()
        self._adapt_poll_interval()
        if not self.judges_in_waves:
            return
        for partition_id in list(self.finished_keys.keys() | self.failure_keys.keys()):
            if partition_id == "val":
                continue
            terminal = self.finished_keys[partition_id] | self.failure_keys[partition_id]
            released = self._released[partition_id]
            released &= terminal  # groups cleared since (trained, evicted, surplus) leave
            if not (self.pending_keys[partition_id] or self.running_keys[partition_id]):
                released |= terminal
                continue
            held = terminal - released
            self.finished_keys[partition_id] -= held
            self.failure_keys[partition_id] -= held
            self.running_keys[partition_id] |= held

    def _check_rollout_servers(self) -> None:
        """verl's agent loop marks a group ``failure`` when a request raised, and the prompt is issued again: a dead
        rollout server would fail every group forever. On new failed groups, the servers are pinged; a dead one's
        ``ActorDiedError`` is raised here (the driver says it in one line, driver.explain_failure)."""
        failed = set().union(*self.failure_keys.values()) if self.failure_keys else set()
        new = failed - self._failed_seen
        self._failed_seen |= new
        if new:
            raise_if_a_server_died(self.trainer)

    def _adapt_poll_interval(self) -> None:
        """The next wait: the shortest after any change of a group's status (or a refill), longer while none."""
        snapshot = tuple(sorted(
            (pid, len(self.pending_keys[pid]), len(self.running_keys[pid]), len(self.finished_keys[pid]),
             len(self.failure_keys[pid]), len(self.partitions[pid]))
            for pid in self.partitions.keys() | self.pending_keys.keys() | self.running_keys.keys()))
        if snapshot != self._last_snapshot:
            self.poll_interval = self.min_poll_interval
        else:
            self.poll_interval = min(self.poll_interval * POLL_GROWTH, self.max_poll_interval)
        self._last_snapshot = snapshot

    def _select_prompt_uids(self, partition_id: str, sampleable_keys: set[str], batch_size: int):
        # verl sorts by step (stable); over uids in draw order instead of a set's order, the first drawn win
        return super()._select_prompt_uids(partition_id, sorted(sampleable_keys), batch_size)  # type: ignore[arg-type]

    def _materialize_batch(self, partition_id: str, selected_prompt_uids: list[str], partition_snapshot: dict[str, dict]):
        # the trained batch's rows in (uid, session, output) order, not TransferQueue's arrival order
        ordered = dict(sorted(partition_snapshot.items(), key=lambda item: trajectory_key(item[0])))
        return super()._materialize_batch(partition_id, selected_prompt_uids, ordered)

    def judged_groups(self) -> dict[str, float | None]:
        """The training groups judged so far and still in the buffer: uid -> None (kept) or the dropped group's
        mean reward (saved in rlhooks.pt)."""
        return dict(self._dapo_classification_cache["train"])

    def restore_judged_groups(self, judged: dict[str, float | None]) -> None:
        """A resume: the verdicts on groups judged before the checkpoint. Verdicts on groups no longer in
        TransferQueue are dropped at the next poll, as verl drops its own."""
        self._dapo_classification_cache["train"].update(judged)

    def _stale_now(self, partition_id: str) -> set[str]:
        """Finished groups verl evicts at this poll as too stale whatever the filters say (the async buffer's);
        none in verl's sync mode."""
        return set()

    def _dapo_filtered_keys(self, partition_id: str) -> tuple[set[str], Counter]:
        """Groups the rlhooks filters drop among those finished so far (each group judged once, when it
        finishes), and ``{group mean reward: count}`` of them for verl's filtered-groups table. Stale groups
        (async) are never judged: they reach the learning state and on_rewards_computed once, with the rest."""
        # not verl's: verl's body is DAPO's rule on one TransferQueue field, which the rlhooks filters replace
        stale = self._stale_now(partition_id)
        if partition_id == "val" or self.trainer is None:
            return set(), Counter()
        finished = self.finished_keys[partition_id]
        stale &= finished
        judged = self._dapo_classification_cache[partition_id]
        for uid in judged.keys() - finished:
            del judged[uid]
        reported = self._stale_reported[partition_id]
        reported &= finished  # groups verl evicted since leave
        new = finished - judged.keys() - reported
        report = stale - reported
        if new or report:
            judged.update(self.judge(partition_id, new, stale=report))
            reported |= report
        dropped = {uid: reward for uid, reward in judged.items() if reward is not None and uid not in stale}
        return set(dropped), Counter(dropped.values())

    def judge(self, partition_id: str, uids: set[str], stale: set[str] | frozenset[str] = frozenset()) -> dict[str, float | None]:
        """Newly finished groups through the rlhooks trainer: uid -> None (kept) or the group's mean reward
        (dropped by a filter), for each of ``uids`` not in ``stale`` (groups verl evicts as too stale, which
        the filters do not judge)."""
        assert self.trainer is not None
        with self.trainer.rlhooks_time("judge"):  # the step's timing_s/rlhooks
            return self._judge(partition_id, uids, stale)

    def _judge(self, partition_id: str, uids: set[str], stale: set[str] | frozenset[str]) -> dict[str, float | None]:
        wanted = uids | stale
        keys = sorted((key for key in self.partitions[partition_id] if key.split("_")[0] in wanted), key=trajectory_key)
        out: dict[str, float | None] = {uid: None for uid in uids - stale}
        if not keys:
            return out
        batch = self.scored(partition_id, keys, keep=True)
        evicted = None
        if stale:
            uid = np.asarray(batch["uid"], dtype=object)
            is_stale = np.isin(uid, np.asarray(sorted(stale), dtype=object))
            self.trainer.groups_evicted_stale(batch.select(is_stale))  # every stale group, judged before or not
            shown = np.isin(uid, np.asarray(sorted(uids), dtype=object))  # never shown to the plugins before
            batch, evicted = batch.select(shown), is_stale[shown]
            if not len(batch):
                return out
        keep = self.trainer.groups_scored(batch, evicted)
        # V1 evicts whole groups: a group is dropped when a filter drops any of its rows (rlhooks filters
        # keep or drop whole groups)
        judged = np.ones(len(batch), dtype=bool) if evicted is None else ~evicted
        names, group = np.unique(np.asarray(batch["uid"])[judged], return_inverse=True)
        rows = np.bincount(group, minlength=len(names))
        mean = np.bincount(group, weights=np.asarray(batch["reward"], dtype=np.float64)[judged], minlength=len(names)) / rows
        dropped = np.bincount(group, weights=~keep[judged], minlength=len(names)) > 0
        out.update(zip(names[dropped].tolist(), mean[dropped].tolist()))
        return out

    def scored(self, partition_id: str, keys: list[str], *, keep: bool = False):
        """The trajectories ``keys`` as a Batch: the fields the plugins read for every row read now, in one
        read (``_present_fields``; the dataset row and source known from the dispatch are not read), the others
        when a plugin reads them, for its rows; lengths from the tags. ``keep``: what was read is kept for the
        step's end (:meth:`judged_values`)."""
        fields = self._present_fields(partition_id, keys[0])
        known = self._dispatched_values(keys, fields)
        data = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=[f for f in fields if f not in known])
        values = {**field_values(data), **known}
        if keep:
            self._judged_rows[partition_id].append((np.asarray(keys, dtype=str), values))
        tags = self.partitions[partition_id]
        return scored_batch(values, keys, self.trainer.tokenizer, self.trainer.adapter_functions, fetch=self.fetcher(partition_id),
                            stored=self._stored_fields, tags=[tags.get(k) for k in keys])

    def remember_dispatched(self, prompts: Any) -> None:
        """The prompts the trainer hands the agent loop (a TensorDict with ``uid``): their dataset row and
        source, which every trajectory of the prompt carries into TransferQueue, so judging need not read them."""
        present = set(prompts.keys())
        if "uid" not in present or ROW_KEY not in present or "data_source" not in present:
            return
        uids = objects(prompts.get("uid")).tolist()
        self._dispatched_since.update(uids)
        self._dispatched.update(zip(uids,
                                    zip(objects(prompts.get(ROW_KEY)).astype(np.int64).tolist(),
                                        objects(prompts.get("data_source")).tolist())))

    def _dispatched_values(self, keys: list[str], fields: list[str]) -> dict[str, np.ndarray]:
        """``rlhooks_row`` and ``data_source`` of ``keys`` (those of ``fields``) from the dispatch, one lookup a
        group; nothing when a group was not dispatched by this process (a resume restoring TransferQueue)."""
        wanted = [f for f in (ROW_KEY, "data_source") if f in fields]
        if not wanted or not self._dispatched:
            return {}
        uids, group = np.unique(np.asarray([k.partition("_")[0] for k in keys], dtype=object), return_inverse=True)
        found = [self._dispatched.get(u) for u in uids.tolist()]
        if any(f is None for f in found):
            return {}
        rows = np.fromiter((f[0] for f in found), np.int64, len(found))
        sources = np.empty(len(found), dtype=object)
        sources[:] = [f[1] for f in found]
        out = {ROW_KEY: rows[group], "data_source": sources[group]}
        return {f: out[f] for f in wanted}

    def judged_values(self, partition_id: str, keys: list[str]) -> dict[str, np.ndarray] | None:
        """What judging read of the trajectories ``keys`` (batches.field_values, rows in ``keys`` order), or
        None when one of them was not judged in this process (its rows are then read again)."""
        entries = self._judged_rows.get(partition_id)
        if not entries or len({tuple(sorted(v)) for _, v in entries}) != 1:
            return None
        stored = np.concatenate([k for k, _ in entries])
        order = np.argsort(stored, kind="stable")
        ranked = stored[order]
        want = np.asarray(keys, dtype=str)
        pos = np.minimum(np.searchsorted(ranked, want), len(ranked) - 1)
        if not np.array_equal(ranked[pos], want):
            return None
        rows = order[pos]
        return {f: np.concatenate([v[f] for _, v in entries])[rows] for f in entries[0][1]}

    def forget(self, partition_id: str, keys: list[str]) -> None:
        """The step has ended on ``keys``: what judging kept of them, and of groups no longer in the buffer
        (evicted, surplus), is dropped; so are dispatched prompts no longer in it."""
        live = np.asarray(list(self.partitions[partition_id]), dtype=str)
        gone = np.asarray(keys, dtype=str)
        kept = []
        for stored, values in self._judged_rows.get(partition_id, []):
            mask = np.isin(stored, live) & ~np.isin(stored, gone)
            if mask.all():
                kept.append((stored, values))
            elif mask.any():
                kept.append((stored[mask], {f: v[mask] for f, v in values.items()}))
        self._judged_rows[partition_id] = kept
        trained = {k.partition("_")[0] for k in keys}
        prompts = self.prompt_global_steps[partition_id].keys() | self._dispatched_since
        self._dispatched_since = set()
        self._dispatched = {u: v for u, v in self._dispatched.items() if u in prompts and u not in trained}

    def _present_fields(self, partition_id: str, key: str) -> list[str]:
        """The fields read up front to judge groups, decided once: of those TransferQueue holds for a
        trajectory (the dataset decides some, e.g. extra_info; probed once with one trajectory), those the
        run's plugins read (``batches.scored_fields``)."""
        fields = getattr(self, "_fields_cache", None)
        if fields is None:
            present = self._stored_fields = set(tq.kv_batch_get(keys=[key], partition_id=partition_id).keys())
            fields = self._fields_cache = scored_fields(self.trainer.scored_columns, present,
                                                        reward_in_extras=self.trainer.reward_in_extras)
        return fields

    def fetcher(self, partition_id: str):
        """``fetch(fields, keys)`` for lazy columns: a TransferQueue read of those fields of those keys."""
        return lambda fields, keys: tq.kv_batch_get(keys=list(keys), partition_id=partition_id, select_fields=fields)
