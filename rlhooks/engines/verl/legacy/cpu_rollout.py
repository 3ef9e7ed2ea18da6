"""Generation for the CPU learner: verl's ``HFRollout`` on the actor's own module, wrapped in the
narrowest replacement for ``AgentLoopManager.generate_sequences`` (which needs an LLM server: vLLM
or SGLang), and a weight "sync" for a rollout that reads the actor's weights directly.

What follows the agent loop's contract (``AgentLoopWorker._postprocess`` and
``AgentLoopManager.generate_sequences``; checked against verl's source in tests/verl):

- input: the trainer's generation batch (``raw_prompt`` chat messages, ``data_source``,
  ``reward_model``, ``extra_info``, ``uid``; rows already repeated ``n`` times), prompts rendered
  with the tokenizer's chat template and left padded to ``data.max_prompt_length``, as the agent
  loop does;
- output tensors ``prompts, responses, response_mask, input_ids, attention_mask, position_ids,
  rm_scores`` (reward at the last response token), non-tensors ``__num_turns__`` (2: one user
  turn, one assistant turn), the reward extras and the agent loop's extra fields; meta_info
  ``timing`` and ``reward_extra_keys``;
- rewards by verl's own reward manager (``load_reward_manager``: the configured
  ``reward.custom_reward_function`` in verl's ``NaiveRewardManager.run_single``), as the
  agent loop's reward workers score each finished sample.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any

import numpy as np
import torch

from verl import DataProto

#: non-tensor fields every agent-loop output carries (AgentLoopWorker._postprocess's default extra keys)
AGENT_LOOP_EXTRA_FIELDS = ("turn_scores", "tool_rewards", "min_global_steps", "max_global_steps", "extras")


def _hf_rollout_class():
    from verl.workers.rollout.hf_rollout import HFRollout

    class ColocatedHFRollout(HFRollout):
        """verl's HFRollout, completed. In verl 0.9.1 it cannot be constructed: BaseRollout declares
        resume / release / update_weights abstract and HFRollout does not define them, and its
        ``__init__`` calls ``BaseRollout.__init__()`` without the config / model_config / device_mesh
        that BaseRollout now requires. ``__init__`` here sets what HFRollout's own sets (config, module);
        generation (``generate_sequences``, ``_generate_minibatch``) is HFRollout's. The module is the
        actor's own, so there is nothing to resume, release or load."""

        def __init__(self, module, config):
            self.config = config
            self.module = module

        async def resume(self, tags: list[str]):
            return None

        async def release(self):
            return None

        async def update_weights(self, weights, **kwargs):
            return None

    return ColocatedHFRollout


def _seed(*parts: Any) -> int:
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "little") & (2**63 - 1)


class CPURolloutManager:
    """``async_rollout_manager`` for one CPU process: HFRollout sampling from the actor's module.

    Sampling is seeded by (seed, global step, call within the step), so a resumed run generates
    what the uninterrupted run generated.
    """

    def __init__(self, config: Any, tokenizer: Any, module: torch.nn.Module, *, seed: int = 0):
        from verl.trainer.ppo.reward import load_reward_manager

        self.config = config
        self.tokenizer = tokenizer
        self.rollout = _hf_rollout_class()(module, config.actor_rollout_ref.rollout)
        self.reward_manager = load_reward_manager(config, tokenizer)
        self.prompt_length = int(config.data.max_prompt_length)
        self.seed = seed
        self._step, self._calls = None, 0

    # -- the agent loop's contract ----------------------------------------------------------------
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        started = time.perf_counter()
        step = prompts.meta_info.get("global_steps")
        self._calls = self._calls + 1 if step == self._step else 0
        self._step = step
        inputs = self._tokenize(prompts.non_tensor_batch["raw_prompt"])
        inputs.meta_info.update(eos_token_id=self.tokenizer.eos_token_id, pad_token_id=self.tokenizer.pad_token_id,
                                **{k: v for k, v in prompts.meta_info.items()
                                   if k in ("do_sample", "validate", "temperature", "top_p", "top_k")})
        fork = torch.random.fork_rng()
        with fork:
            torch.manual_seed(_seed(self.seed, step, self._calls))
            out = self.rollout.generate_sequences(inputs)
        generated = time.perf_counter()
        batch = out.batch
        prompt_len = batch["prompts"].size(1)
        response_mask = batch["attention_mask"][:, prompt_len:].clone()
        batch["response_mask"] = response_mask
        scored = DataProto(batch=batch, non_tensor_batch={k: prompts.non_tensor_batch[k] for k in
                                                          ("data_source", "reward_model", "extra_info")
                                                          if k in prompts.non_tensor_batch})
        scores, extras = self._score(scored)
        batch["rm_scores"] = self.reward_manager.assemble_rm_scores(scored, scores)
        b = len(out)
        non_tensors: dict[str, np.ndarray] = {"__num_turns__": np.full(b, 2, dtype=np.int32)}
        keys = list(extras[0].keys()) if extras else []
        for key in keys:
            non_tensors[key] = np.array([e[key] for e in extras])
        for key in AGENT_LOOP_EXTRA_FIELDS:
            non_tensors[key] = np.full(b, None, dtype=object)
        done = time.perf_counter()
        timing = {"agent_loop/generate_sequences/mean": (generated - started) / max(b, 1),
                  "agent_loop/compute_score/mean": (done - generated) / max(b, 1)}
        return DataProto(batch=batch, non_tensor_batch=non_tensors,
                         meta_info={"timing": timing, "reward_extra_keys": keys})

    # -- pieces --------------------------------------------------------------------------------------
    def _tokenize(self, messages: np.ndarray) -> DataProto:
        """Chat template + left padding to max_prompt_length, as the agent loop renders prompts."""
        pad = self.tokenizer.pad_token_id
        ids = torch.full((len(messages), self.prompt_length), pad, dtype=torch.long)
        for i, chat in enumerate(messages):  # one short template render per prompt, as the agent loop does
            tokens = self.tokenizer.apply_chat_template(list(chat), add_generation_prompt=True, tokenize=True)
            tokens = tokens["input_ids"] if isinstance(tokens, dict) or hasattr(tokens, "keys") else tokens
            if len(tokens) > self.prompt_length:
                raise ValueError(f"a prompt has {len(tokens)} tokens, more than data.max_prompt_length="
                                 f"{self.prompt_length}; raise data.max_prompt_length")
            ids[i, self.prompt_length - len(tokens):] = torch.as_tensor(tokens)
        attention = (ids != pad).long()
        position = torch.clamp(torch.cumsum(attention, dim=1) - 1, min=0)
        return DataProto.from_dict(tensors={"input_ids": ids, "attention_mask": attention, "position_ids": position})

    def _score(self, data: DataProto) -> tuple[list[float], list[dict]]:
        async def score_all():
            return await asyncio.gather(*(self.reward_manager.run_single(data[i: i + 1]) for i in range(len(data))))

        loop = self.reward_manager.loop
        results = loop.run_until_complete(score_all())
        return [float(r["reward_score"]) for r in results], [r["reward_extra_info"] for r in results]


class ColocatedWeights:
    """``checkpoint_manager`` when the rollout samples from the actor's own module: there is nothing to
    copy (verl's CheckpointEngineManager moves weights to separate rollout replicas); records versions."""

    def __init__(self) -> None:
        self.updates: list[int | None] = []

    def update_weights(self, global_steps: int | None = None) -> None:
        self.updates.append(global_steps)

    def sleep_replicas(self) -> None:
        pass  # no separate replicas to put to sleep: generation runs on the actor's module in this process
