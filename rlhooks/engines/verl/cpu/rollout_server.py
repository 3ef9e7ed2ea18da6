"""A CPU rollout server for verl's V1 trainer: Hugging Face generation behind verl's rollout contract.

verl 0.9.1's V1 trainer generates through rollout servers (vLLM, SGLang, TensorRT-LLM), all of which need a
GPU. This module is the same three pieces for the host CPU, registered through verl's extension points
(``tests/verl/test_cpu_rollout_contract.py`` checks them against the vLLM pieces' source):

``CPURolloutReplica``  a ``RolloutReplica`` (registered as ``cpu`` by ``ray_process.register_cpu_rollout``); its
                       ``launch_servers()`` starts one ``CPURolloutServer`` actor per replica, named as
                       verl names vLLM's (``cpu_server_<replica>_<node>``).
``CPURolloutServer``   the server actor: ``generate()`` returns a ``TokenOutput`` (HF ``generate`` on a
                       copy of the policy); the control methods verl's replica, checkpoint engine and
                       LLM client call (sleep/wake_up, KV cache, abort/resume, profiling, global steps).
``CPURolloutAdapter``  the worker-side ``BaseRollout`` (``rollout.name=cpu``), living in the actor
                       worker's process as vLLM's ``ServerAdapter`` does: ``update_weights`` receives
                       the actor's full tensors from verl's ``naive`` checkpoint engine and loads them
                       into the server; ``resume``/``release`` wake and sleep it.

Sampling is seeded per request from (rollout seed, weight version, prompt tokens, sampling params, the
how-many-th such request this is), so a resumed run regenerates what the uninterrupted run generated.

A benchmark instrument (issue 40 item 4, ``benchmarks/v1_generation.py``): with ``RLHOOKS_CPU_ROLLOUT_STUB``
set to a rate in tokens a second, the server does not run the model: each batch takes its tokens / rate seconds
and each request gets one of two canned answers (chosen by its seed: a group's rewards vary, so filters keep
groups); ``RLHOOKS_CPU_ROLLOUT_LOG`` names a file where each batch appends ``<time> <requests> <tokens>`` (at its
end, after its tokens / rate seconds) and each sleep and wake-up ``<time> sleep`` / ``<time> wake``. Its
counterpart in the trainer, ``RLHOOKS_V1_TRACE`` (``v1.trainer.TRACE_ENV``, an absolute path), gets a line
``<start> <end> <what>`` per timed rlhooks interval (``judge``, ``dispatch``, ``step_end``), in the same wall time.
With the model (no stub), ``RLHOOKS_CPU_ROLLOUT_DECODE_TRACE`` names a file where each batched decode appends
``<start> <end> <requests>`` (``benchmarks/cpu_step.py``: how much of a V1 step's generation is decoding).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from collections import Counter
from collections.abc import Iterable
from typing import Any, NamedTuple, Optional

import ray
import torch
from ray.actor import ActorHandle
from torch.distributed.device_mesh import DeviceMesh
from verl.workers.config import HFModelConfig, RolloutConfig
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutMode, RolloutReplica, TokenOutput

#: ``actor_rollout_ref.rollout.name`` of the CPU rollout
ROLLOUT_NAME = "cpu"
SERVER_PREFIX = f"{ROLLOUT_NAME}_"


#: how long the first request of a batch waits for the others already sent (a step dispatches its prompts' n
#: answers together): one batched decode of 64 rows costs about what 2-3 single ones do
BATCH_WINDOW_S = 0.005
#: the benchmark stub (module docstring): tokens a second, and the batch log
STUB_RATE_ENV, STUB_LOG_ENV = "RLHOOKS_CPU_ROLLOUT_STUB", "RLHOOKS_CPU_ROLLOUT_LOG"
#: the decode trace (module docstring)
DECODE_TRACE_ENV = "RLHOOKS_CPU_ROLLOUT_DECODE_TRACE"
#: the stub's two answers: one in the reward functions' format, one not
STUB_ANSWERS = ("<reasoning>3 + 5 = 8</reasoning><answer>42</answer>", "42")  # in the tiny policy's vocabulary


class _Request(NamedTuple):
    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    top_k: int
    top_p: float
    logprobs: bool
    seed: int

    @property
    def shape(self) -> tuple:
        """What requests decoded in one batch share: prompt length and sampling settings."""
        return len(self.prompt_ids), self.temperature, self.top_k, self.top_p


def _processed(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """The logits sampling draws from, as Hugging Face's warpers process them (temperature, top-k, top-p): removed
    tokens at -inf. Greedy (temperature 0) takes the raw logits."""
    logits = logits.double()
    if temperature <= 0:
        return logits
    logits = logits / temperature
    if 0 < top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        ordered, index = logits.sort(dim=-1, descending=False)
        cumulative = ordered.softmax(-1).cumsum(-1)
        remove = cumulative <= 1 - top_p
        remove[:, -1] = False  # the most likely token always stays
        logits = logits.masked_fill(remove.scatter(-1, index, remove), float("-inf"))
    return logits


def request_seed(*parts: Any) -> int:
    """A 63-bit seed from the parts' JSON (stable across processes, unlike ``hash``)."""
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


class CPURolloutServer:
    """One replica's generation server on the host CPU (what ``vLLMHttpServer`` is on GPUs).

    Requests are decoded in batches (``generate``): those delivered within ``BATCH_WINDOW_S`` of the first go
    together, as vLLM batches what it has. Anything that changes what the next request generates with (weights,
    version, sleep) or waits for requests first decodes the ones already delivered (``_flush``), so each request
    generates with the weights it arrived under, as when they ran one at a time."""

    def __init__(self, config: RolloutConfig, model_config: HFModelConfig, rollout_mode: RolloutMode,
                 workers: list[ActorHandle], replica_rank: int, node_rank: int, gpus_per_node: int,
                 nnodes: int, cuda_visible_devices: str):
        from transformers import AutoModelForCausalLM
        from verl.utils.config import omega_conf_to_dataclass

        # as vLLM's server: the replica passes the rollout config as a dataclass, the model's as verl's DictConfig
        self.config = omega_conf_to_dataclass(config)
        self.model_config = model_config = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
        self.rollout_mode, self.workers = rollout_mode, workers
        self.replica_rank, self.node_rank, self.nnodes = replica_rank, node_rank, nnodes
        self.global_steps: int | None = None
        # float64: batched rows decode as the row alone would (see _decode); the actor's float32 weights load into it
        self.model = AutoModelForCausalLM.from_pretrained(
            model_config.local_path, dtype=torch.float64, attn_implementation="sdpa")
        self.model.eval()
        self.eos_token_id = self.model.generation_config.eos_token_id
        self.pad_token_id = self.model.config.pad_token_id
        self.asleep = False
        self._issued: Counter = Counter()  # requests per (weights, prompt, params): the seed's last part
        self._queue: list[tuple[_Request, asyncio.Future]] = []  # requests waiting for the next batch
        self._decoding = False
        # vLLM's submission gate: abort_all_requests closes it, resume_generation opens it; a request that arrives
        # behind it is parked until then (or answered "aborted" when the abort rejects late arrivals)
        self._gate_closed = False
        self._rejecting = False
        self._reopened: asyncio.Event | None = None  # made by the abort, in the actor's event loop
        self.weight_loads = 0
        self._stub = _Stub.from_env(model_config.local_path, self.eos_token_id)
        self._decode_trace = os.environ.get(DECODE_TRACE_ENV)  # read once, as the stub's settings are

    # -- generation ------------------------------------------------------------------------------
    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str,
                       image_data: Optional[list[Any]] = None, video_data: Optional[list[Any]] = None,
                       audio_data: Optional[list[Any]] = None, mm_processor_kwargs: Optional[dict[str, Any]] = None,
                       priority: int = 0, kv_transfer_params: Optional[dict] = None) -> TokenOutput:
        """One request, decoded in a batch with the requests delivered meanwhile (``_decode``)."""
        if image_data or video_data or audio_data:
            raise ValueError("the CPU rollout server generates text only: this request carries images, "
                             "videos or audio (use a vLLM or SGLang rollout for multimodal models)")
        while self._gate_closed:  # no await between this check and the queueing below
            if self._rejecting:
                return TokenOutput(token_ids=[], log_probs=None, stop_reason="aborted",
                                   extra_fields={"global_steps": self.global_steps})
            await self._reopened.wait()
        request = self._request(prompt_ids, sampling_params)
        future = asyncio.get_running_loop().create_future()
        self._queue.append((request, future))
        if not self._decoding:  # this call decodes every batch until the queue is empty; the others await
            self._decoding = True
            try:
                while self._queue:
                    await asyncio.sleep(BATCH_WINDOW_S)  # requests delivered by now join this batch
                    batch, self._queue = self._queue, []
                    self._decode_all(batch)
            finally:
                self._decoding = False
        return await future

    def _flush(self) -> None:
        """Decode the requests waiting for a batch now (their callers get their results)."""
        batch, self._queue = self._queue, []
        if batch:
            self._decode_all(batch)

    def _request(self, prompt_ids: list[int], sampling_params: dict[str, Any]) -> _Request:
        """A request's decoding settings and its seed (in arrival order: the seed's occurrence counter)."""
        prompt_ids = [int(t) for t in prompt_ids]
        params = dict(sampling_params)
        # vLLM's server defaults max_model_len to the model's max_position_embeddings
        room = int(self.config.max_model_len or self.model.config.max_position_embeddings) - len(prompt_ids)
        if room < 1:
            raise ValueError(f"prompt of {len(prompt_ids)} tokens leaves no room to generate within "
                             f"rollout.max_model_len={self.config.max_model_len}")
        max_tokens = int(params.pop("max_tokens", params.pop("max_new_tokens", self.config.response_length)))
        max_tokens = max(1, min(max_tokens, int(self.config.response_length), room))
        key = json.dumps([self.global_steps, prompt_ids, sorted((k, str(v)) for k, v in sampling_params.items())])
        occurrence = self._issued[key]
        self._issued[key] += 1
        return _Request(prompt_ids, max_tokens, float(params.get("temperature", 1.0) or 0.0),
                        int(params.get("top_k", -1) or -1), float(params.get("top_p", 1.0) or 1.0),
                        bool(params.get("logprobs")), request_seed(int(getattr(self.config, "seed", 0)), key, occurrence))

    def _decode_all(self, batch: list[tuple[_Request, asyncio.Future]]) -> None:
        """Each group of requests that decode alike (prompt length, sampling settings) as one batch."""
        groups: dict[tuple, list[tuple[_Request, asyncio.Future]]] = {}
        for request, future in batch:
            groups.setdefault(request.shape, []).append((request, future))
        for members in groups.values():
            try:
                outputs = self._decode([request for request, _ in members])
            except Exception as exc:  # each caller gets its own request's failure
                for _, future in members:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), output in zip(members, outputs):
                if not future.done():
                    future.set_result(output)

    @torch.no_grad()
    def _decode(self, requests: list[_Request]) -> list[TokenOutput]:
        """The requests' outputs: the model's (``_generate``), or the benchmark stub's canned answers."""
        if self._stub is not None:
            return self._stub.answer(requests, self.global_steps)
        started = time.time()
        outputs = self._generate(requests)
        if self._decode_trace:
            with open(self._decode_trace, "a") as fh:
                fh.write(f"{started:.6f} {time.time():.6f} {len(requests)}\n")
        return outputs

    def _generate(self, requests: list[_Request]) -> list[TokenOutput]:
        """Requests of one prompt length and sampling settings, decoded together with a KV cache. Each row samples
        with its own generator (Gumbel-max over the processed logits: a draw from their softmax), so what a request
        generates does not depend on which requests shared its batch; the model runs in float64, where the rows of
        a batch and the row alone differ by ~1e-16 (float32: ~1e-6), so no sampled token turns on it in practice."""
        first = requests[0]
        rows, steps = len(requests), max(r.max_tokens for r in requests)
        generators = [torch.Generator().manual_seed(r.seed) for r in requests]
        ids = torch.tensor([r.prompt_ids for r in requests])
        eos = torch.tensor(_as_list(self.eos_token_id))
        tokens = torch.full((rows, steps), int(self.pad_token_id or 0), dtype=torch.long)
        log_probs = torch.zeros(rows, steps, dtype=torch.float64)
        done = torch.zeros(rows, dtype=torch.bool)
        length = torch.full((rows,), steps, dtype=torch.long)
        cache = None
        for step in range(steps):
            out = self.model(input_ids=ids, past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            logits = _processed(out.logits[:, -1, :], first.temperature, first.top_k, first.top_p)
            if first.temperature > 0:
                noise = torch.stack([torch.rand(logits.shape[-1], generator=g, dtype=torch.float64) for g in generators])
                chosen = (logits - torch.log(-torch.log(noise.clamp_min(1e-300)))).argmax(-1)
            else:
                chosen = logits.argmax(-1)
            tokens[:, step] = torch.where(done, tokens[:, step], chosen)
            log_probs[:, step] = logits.log_softmax(-1).gather(-1, chosen[:, None])[:, 0]
            ended = ~done & torch.isin(chosen, eos)
            length = torch.where(ended, step + 1, length)
            done |= ended
            if bool(done.all()):
                break
            ids = chosen[:, None]
        outputs = []
        for row, request in enumerate(requests):
            n = int(min(length[row], request.max_tokens))
            token_ids = tokens[row, :n].tolist()
            finished = bool(token_ids) and token_ids[-1] in eos.tolist()
            outputs.append(TokenOutput(
                token_ids=token_ids, log_probs=log_probs[row, :n].tolist() if request.logprobs else None,
                stop_reason="completed" if finished else "length", num_preempted=0,
                extra_fields={"global_steps": self.global_steps}))
        return outputs

    # -- weights (from CPURolloutAdapter.update_weights) ------------------------------------------------
    async def load_weights(self, state: dict[str, torch.Tensor], global_steps: int | None = None) -> int:
        """The actor's full tensors (Hugging Face names) into the server's model; the count loaded."""
        self._flush()
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        tied = {k for k in missing if k == "lm_head.weight" and self.model.config.tie_word_embeddings}
        if unexpected or set(missing) - tied:
            raise ValueError(f"the actor's weights do not fit the rollout model: missing {sorted(set(missing) - tied)}, "
                             f"unexpected {sorted(unexpected)}")
        if global_steps is not None:
            self.global_steps = global_steps
        self.weight_loads += 1
        return len(state)

    # -- control methods verl's replica, checkpoint engine and LLM client call -------------------------
    # On the host CPU there is no device memory to free or restore and no KV cache kept between batches
    # (each batch builds its own), so these decode what is queued (_flush) where order matters, record state and return.
    async def wake_up(self, tags: list[str] | None = None):
        self.asleep = False
        if self._stub is not None:
            self._stub.event("wake")

    async def sleep(self):
        self._flush()
        self.asleep = True
        if self._stub is not None:
            self._stub.event("sleep")

    # no KV cache is kept between batches and there is no profiler: the vLLM server's cache and profile
    # controls below are no-ops here (VERL_NOTES "V1 on CPU", 4)
    async def clear_kv_cache(self):
        pass

    async def release_kv_cache(self):
        pass

    async def resume_kv_cache(self):
        pass

    async def start_profile(self, **kwargs):
        pass

    async def stop_profile(self):
        pass

    async def set_global_steps(self, global_steps: int):
        self._flush()
        self.global_steps = global_steps

    async def wait_for_requests_to_drain(self):
        self._flush()  # requests delivered so far run to completion now: none is in flight after this

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict[str, Any]:
        """As vLLM's: closes the submission gate until ``resume_generation`` (verl's colocate_async aborts, sleeps,
        trains, loads weights, resumes: nothing generates in between). Requests delivered before it run to
        completion here instead of returning partial output, so nothing is in flight after it."""
        self._gate_closed, self._rejecting = True, bool(reject_request)
        if self._reopened is None or self._reopened.is_set():
            self._reopened = asyncio.Event()
        self._flush()
        return {"aborted_count": 0, "request_ids": []}

    async def resume_generation(self):
        """Opens the gate ``abort_all_requests`` closed: parked requests go on."""
        self._gate_closed = self._rejecting = False
        if self._reopened is not None:
            self._reopened.set()

    async def abort_request(self, request_id: str, reset_prefix_cache: bool = True) -> dict[str, Any]:
        return {"aborted": False, "request_id": request_id, "error": "Request not found on any server"}

    def get_server_address(self):
        """(node address, port): no HTTP endpoint, so port 0 (verl reaches the server through its handle)."""
        return ray.util.get_node_ip_address(), 0

    def stats(self) -> dict[str, Any]:
        """What tests read back: weight loads and version, whether asleep."""
        return {"weight_loads": self.weight_loads, "global_steps": self.global_steps, "asleep": self.asleep}


class _Stub:
    """The fixed-rate rollout of the module docstring: canned answers, a batch taking its tokens / rate seconds."""

    def __init__(self, rate: float, answers: list[list[int]], log: str | None):
        self.rate, self.answers, self.log = rate, answers, log

    @classmethod
    def from_env(cls, model_path: str, eos_token_id: Any) -> _Stub | None:
        rate = os.environ.get(STUB_RATE_ENV)
        if not rate:
            return None
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_path)
        eos = _as_list(eos_token_id)[:1]
        answers = [tokenizer.encode(text, add_special_tokens=False) + eos for text in STUB_ANSWERS]
        return cls(float(rate), answers, os.environ.get(STUB_LOG_ENV))

    def event(self, name: str) -> None:
        """A line ``<time> <name>`` in the log (``sleep`` / ``wake``: the benchmark counts the time awake)."""
        if self.log:
            with open(self.log, "a") as fh:
                fh.write(f"{time.time():.6f} {name}\n")

    def answer(self, requests: list[_Request], global_steps: int | None) -> list[TokenOutput]:
        full = [self.answers[r.seed % len(self.answers)] for r in requests]
        chosen = [ids[:r.max_tokens] for r, ids in zip(requests, full)]
        tokens = sum(map(len, chosen))
        time.sleep(tokens / self.rate)  # a busy server: generation is what the batch waits on
        if self.log:
            with open(self.log, "a") as fh:
                fh.write(f"{time.time():.6f} {len(requests)} {tokens}\n")
        return [TokenOutput(token_ids=ids, log_probs=[0.0] * len(ids) if r.logprobs else None,
                            stop_reason="completed" if len(ids) == len(whole) else "length", num_preempted=0,
                            extra_fields={"global_steps": global_steps})
                for r, ids, whole in zip(requests, chosen, full)]


def _as_list(value: Any) -> list[int]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


class CPURolloutReplica(RolloutReplica):
    """``RolloutReplica`` for ``rollout.name=cpu``: one server actor per replica node, on that node."""

    def __init__(self, replica_rank: int, config: RolloutConfig, model_config: HFModelConfig, gpus_per_node: int = 8,
                 is_reward_model: bool = False, is_teacher_model: bool = False, name_suffix: str = ""):
        super().__init__(replica_rank, config, model_config, gpus_per_node, is_reward_model, is_teacher_model,
                         name_suffix)
        self.server_class = ray.remote(CPURolloutServer)

    async def launch_servers(self):
        """Launch the server actor of each node (on the node of the workers it serves)."""
        import asyncio

        if len(self.workers) != self.world_size:
            raise RuntimeError(f"{len(self.workers)} rollout workers for a replica of world size {self.world_size}")
        node_ids = await asyncio.gather(*[
            worker.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()) for worker in self.workers
        ]) if self.workers else [ray.get_runtime_context().get_node_id()] * self.world_size
        for node_rank in range(self.nnodes):
            kind = "reward_" if self.is_reward_model else "teacher_" if self.is_teacher_model else ""
            name = f"{SERVER_PREFIX}server_{kind}{self.replica_rank}_{node_rank}{self.name_suffix}"
            server = self.server_class.options(
                scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                    node_id=node_ids[node_rank * self.gpus_per_replica_node], soft=False),
                name=name, num_cpus=0, max_concurrency=self.max_concurrency,
            ).remote(config=self.config, model_config=self.model_config, rollout_mode=self.rollout_mode,
                     workers=self.workers[node_rank * self.gpus_per_replica_node:(node_rank + 1) * self.gpus_per_replica_node],
                     replica_rank=self.replica_rank, node_rank=node_rank, gpus_per_node=self.gpus_per_replica_node,
                     nnodes=self.nnodes, cuda_visible_devices="")  # no accelerator to make visible
            self.servers.append(server)
        address, _ = await self.servers[0].get_server_address.remote()
        self._server_handle = self.servers[0]
        # the address names the replica (verl's router keys servers by it); there is no HTTP endpoint
        self._server_address = f"{address}:{SERVER_PREFIX}replica{self.replica_rank}{self.name_suffix}"

    def rollout_worker_use_gpu(self) -> bool:
        return False  # not verl's: a constant answer (verl's is True), nothing of it to keep


class CPURolloutAdapter(BaseRollout):
    """The rollout inside verl's actor worker (``get_rollout_class("cpu")``): the client of this rank's
    ``CPURolloutServer`` for weights and sleep/wake, as ``vllm_rollout.ServerAdapter`` is vLLM's."""

    def __init__(self, config: RolloutConfig, model_config: HFModelConfig, device_mesh: DeviceMesh,
                 replica_rank: int = -1):
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", 0))
        local_world_size = int(os.environ.get("RAY_LOCAL_WORLD_SIZE", 1))
        world = (self.config.tensor_model_parallel_size * self.config.data_parallel_size
                 * self.config.pipeline_model_parallel_size)
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self.rollout_rank = rank % world
        self.node_rank = self.rollout_rank // local_world_size
        self._has_server = self.rollout_rank % local_world_size == 0  # one rank per node talks to its server
        self.server_handle: ActorHandle | None = None

    def _server(self) -> ActorHandle | None:
        if not self._has_server:
            return None
        if self.server_handle is None:  # servers start after the workers (launch_servers), so look up late
            self.server_handle = ray.get_actor(f"{SERVER_PREFIX}server_{self.replica_rank}_{self.node_rank}")
        return self.server_handle

    async def resume(self, tags: list[str]):
        if self.config.free_cache_engine and (server := self._server()) is not None:
            await server.wake_up.remote(tags=tags)

    async def release(self):
        if self.config.free_cache_engine and (server := self._server()) is not None:
            await server.sleep.remote()

    @torch.no_grad()
    async def update_weights(self, weights: Iterable[tuple[str, torch.Tensor]], global_steps: int = None,
                             wire_format: str = "named_tensors", **kwargs):
        """The actor's full tensors (the ``naive`` checkpoint engine's generator) into the server."""
        if wire_format != "named_tensors":
            raise ValueError(f"the CPU rollout takes full tensors (wire_format='named_tensors'), not {wire_format!r}: "
                             "use the naive checkpoint engine")
        if kwargs.get("peft_config") is not None:
            raise ValueError("the CPU rollout loads full weights; with LoRA set actor_rollout_ref.model.lora.merge=true")
        state = {name: tensor.detach().to("cpu", copy=True) for name, tensor in weights}
        if (server := self._server()) is not None:
            await server.load_weights.remote(state, global_steps)

    def generate_sequences(self, prompts):
        raise NotImplementedError("the CPU rollout generates through its server (CPURolloutReplica), as vLLM's does")

