"""The legacy trainer on CPU, no Ray, no model: its worker-level stand-ins.

Only the calls that need GPUs and a model are replaced: the rollout manager's
``generate_sequences``, the actor's log-prob and update calls, the worker group's checkpoint
save/load and the weight sync. Everything else is verl's own code: DataProto, RLHFDataset,
StatefulDataLoader, compute_advantage (GRPO), Tracking (console), _balance_batch, checkpoints.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from rlhooks.engines.verl.legacy.trainer import RLHooksRayPPOTrainer
from verl import DataProto

from ..verl_shim_helpers import PROMPT_LEN, RESPONSE_LEN


class StandinRollout:
    """async_rollout_manager.generate_sequences: right answers by source, rm_scores like the reward loop."""

    def __init__(self, tokenizer, num_workers: int = 1):
        self.tok = tokenizer
        self.num_workers = num_workers  # actor_rollout_ref.rollout.agent.num_workers
        self.calls = 0

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        self.calls += 1
        # AgentLoopManager splits the rows over its workers with DataProto.chunk, which refuses unequal chunks
        gen = DataProto.concat(prompts.chunk(self.num_workers))
        b = len(gen)
        pad = self.tok.pad_token_id
        prompt_ids = torch.full((b, PROMPT_LEN), pad, dtype=torch.long)
        responses = torch.full((b, RESPONSE_LEN), pad, dtype=torch.long)
        acc = np.zeros(b)
        for i in range(b):
            text = gen.non_tensor_batch["raw_prompt"][i][0]["content"]
            ids = self.tok(text)["input_ids"][-PROMPT_LEN:]
            prompt_ids[i, PROMPT_LEN - len(ids):] = torch.tensor(ids)  # left padded, as verl's rollout
            source = gen.non_tensor_batch["data_source"][i]
            truth = gen.non_tensor_batch["reward_model"][i]["ground_truth"]
            right = source == "easy" or (source == "mixed" and i % 2 == 0)
            answer = truth if right else "0"
            words = ["the", "answer", "is", answer] if i % 2 == 0 else ["answer", answer]  # ragged lengths
            r = self.tok(" ".join(words))["input_ids"][:RESPONSE_LEN]
            responses[i, : len(r)] = torch.tensor(r)
            acc[i] = float(right)
        prompt_mask = (prompt_ids != pad).long()
        response_mask = (responses != pad).long()
        attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
        position_ids = torch.clamp(torch.cumsum(attention_mask, dim=1) - 1, min=0)
        rm_scores = torch.zeros(b, RESPONSE_LEN)
        last = response_mask.sum(-1) - 1
        rm_scores[torch.arange(b), last] = torch.as_tensor(acc, dtype=torch.float32)
        # the keys of verl's agent loop output (AgentLoopWorker._postprocess, AgentLoopManager.generate_sequences)
        def extra() -> np.ndarray:
            return np.full(b, None, dtype=object)

        return DataProto.from_dict(
            tensors={"prompts": prompt_ids, "responses": responses, "response_mask": response_mask,
                     "input_ids": torch.cat([prompt_ids, responses], 1), "attention_mask": attention_mask,
                     "position_ids": position_ids, "rm_scores": rm_scores},
            non_tensors={"__num_turns__": np.full(b, 2, dtype=np.int32), "acc": acc,
                         "multi_modal_inputs": np.array([{} for _ in range(b)], dtype=object),
                         **{k: extra() for k in ("turn_scores", "tool_rewards", "min_global_steps",
                                                 "max_global_steps", "extras")}},
            meta_info={"timing": {"agent_loop/generate_sequences/mean": 0.01}, "reward_extra_keys": ["acc"]},
        )


class StandinWeights:
    """checkpoint_manager: weight sync between trainer and rollout replicas."""

    def __init__(self):
        self.updates: list[int] = []

    def update_weights(self, global_steps: int | None = None) -> None:
        self.updates.append(global_steps)

    def sleep_replicas(self) -> None:
        pass


class StandinWorkerGroup:
    """actor_rollout_wg (also ref_policy_wg, as verl's combined ActorRolloutRef group): the methods of
    ``ActorRolloutRefWorker`` the trainer calls, without a model, following the real worker's rules so
    that verl's own ``_compute_old_log_prob`` / ``_compute_ref_log_prob`` / ``_update_actor`` run on them:

    - input in verl's no-padding layout (nested ``input_ids``), outputs as nested per-token tensors that
      ``no_padding_2_padding`` slices back;
    - ``entropy`` only when ``calculate_entropy`` is set;
    - ``metrics["mfu"]`` only when the batch carries ``global_token_num`` (``TrainingWorker._postprocess_output``;
      the update computes its own per mini-batch, as ``train_mini_batch`` does).

    Log-probs are constant: old -1.0, reference -1.1, so the "kl" estimator gives 0.1 per valid token.
    """

    OLD_LOG_PROB, REF_LOG_PROB, ENTROPY, PPO_KL = -1.0, -1.1, 0.5, 0.01

    def __init__(self):
        self._dispatch_info = {"actor": [0]}  # one data-parallel rank, for verl's _balance_batch
        self.world_size = 1
        self.loaded: list[str] = []
        self.ref_calls: list[int] = []
        self.trained: list = []  # the TensorDicts of each update_actor call

    def compute_log_prob(self, data):
        return self._infer(data, self.OLD_LOG_PROB)

    def compute_ref_log_prob(self, data):
        self.ref_calls.append(int(data.batch_size[0]))
        return self._infer(data, self.REF_LOG_PROB)

    def update_actor(self, data):
        from verl.utils import tensordict_utils as tu

        mini_batch_size = tu.pop(data, key="mini_batch_size", default=None)
        num_mini_batch = tu.pop(data, key="num_mini_batch", default=None)
        assert mini_batch_size is not None or num_mini_batch is not None  # train_mini_batch's rule
        assert data["input_ids"].is_nested, "update_actor takes verl's no-padding layout"
        for key in ("old_log_probs", "advantages", "response_mask"):  # what the PPO loss reads
            assert key in data.keys(), f"update_actor needs {key!r}"
        self.trained.append(data)
        adv = data["advantages"]
        metrics = {"actor/pg_loss": [float(adv.abs().mean())], "actor/ppo_kl": [self.PPO_KL],
                   "loss": 0.0, "mfu": 0.0}
        return tu.get_tensordict(tensor_dict={}, non_tensor_dict={"metrics": metrics})

    def _infer(self, data, value: float):
        from verl.utils import tensordict_utils as tu

        input_ids = data["input_ids"]
        assert input_ids.is_nested, "the log-prob pass takes verl's no-padding layout (left_right_2_no_padding)"
        offsets = input_ids.offsets()
        tokens = int(offsets[-1])

        def per_token(v: float):
            return torch.nested.nested_tensor_from_jagged(torch.full((tokens,), v), offsets=offsets)

        output = {"log_probs": per_token(value)}
        if tu.get(data, "calculate_entropy", default=False):
            output["entropy"] = per_token(self.ENTROPY)
        metrics = {"loss": 0.0}
        if tu.get(data, "global_token_num") is not None:
            metrics["mfu"] = 0.0
        return tu.get_tensordict(tensor_dict=output, non_tensor_dict={"metrics": metrics})

    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
        os.makedirs(local_path, exist_ok=True)
        Path(local_path, "actor.txt").write_text(str(global_step))

    def load_checkpoint(self, local_path, hdfs_path=None, del_local_after_load=False):
        self.loaded.append(Path(local_path, "actor.txt").read_text())


class StandinPools:
    def get_n_gpus(self) -> int:
        return 1


class CPUTrainer(RLHooksRayPPOTrainer):
    """The shim with the model's work (generation, log-probs, actor update) answered by stand-ins at
    the worker level; verl's trainer methods around them are verl's own."""

    def attach_standins(self) -> CPUTrainer:
        self.async_rollout_manager = StandinRollout(self.tokenizer, self.config.actor_rollout_ref.rollout.agent.num_workers)
        self.checkpoint_manager = StandinWeights()
        self.actor_rollout_wg = self.ref_policy_wg = StandinWorkerGroup()
        self.resource_pool_manager = StandinPools()
        return self

    @property
    def ref_calls(self) -> list[int]:
        return self.actor_rollout_wg.ref_calls

    @property
    def trained(self) -> list[DataProto]:
        """The batches of each actor update, back in verl's padded layout (as trained rows)."""
        return [_padded(td) for td in self.actor_rollout_wg.trained]


def _padded(td) -> DataProto:
    """A trained TensorDict as a DataProto of its fixed-shape tensors and non-tensor columns."""
    tensors = {k: v for k, v in td.items() if isinstance(v, torch.Tensor) and not v.is_nested}
    non_tensors = {k: np.asarray(td.get(k).tolist(), dtype=object) for k in td.keys()
                   if k in ("uid", "data_source", "rlhooks_traj", "rlhooks_sample_id", "rlhooks_row")}
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)
