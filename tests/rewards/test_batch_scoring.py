"""Batched and asynchronous reward scoring (issue 32, item 12): an LLM-judge-like ``async def
score_batch`` gets each generation batch in one call, sends its requests concurrently, and passes the
contract kit; the same judge as docs/how-to/rewards.md shows."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from rlhooks import RewardFunction
from rlhooks.core.rewards import RewardEntry, RewardPipeline
from rlhooks.testing import RewardFunctionContract


class JudgeReward(RewardFunction):
    """An LLM-judge-like scorer: one request per distinct (response, target), at most 8 in flight."""

    name = "judge"
    reward_range = (0.0, 1.0)

    def __init__(self, options=None, max_in_flight: int = 8):
        super().__init__(options)
        self.max_in_flight = max_in_flight
        self.requests = 0
        self.in_flight = self.most_in_flight = 0

    async def _judge(self, response: str, target: str) -> float:  # stands in for an HTTP call
        self.requests += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0.001)
        self.in_flight -= 1
        return 1.0 if target.strip() and target.strip() in response else 0.0

    async def score_batch(self, responses: np.ndarray, targets: np.ndarray) -> np.ndarray:
        pairs = list(zip(responses.tolist(), targets.tolist()))
        distinct = list(dict.fromkeys(pairs))  # GRPO groups repeat a prompt: judge each pair once
        limit = asyncio.Semaphore(self.max_in_flight)

        async def one(pair: tuple[str, str]) -> float:
            async with limit:
                return await self._judge(*pair)

        scores = dict(zip(distinct, await asyncio.gather(*(one(p) for p in distinct))))
        return np.fromiter((scores[p] for p in pairs), float, len(pairs))

    def __call__(self, response: str, target: str, **info) -> float:
        return float(asyncio.run(self.score_batch(np.array([response], object), np.array([target], object)))[0])


class TestJudgeReward(RewardFunctionContract):
    plugin_class = JudgeReward  # collects only the hooks it implements (no skips)

    @pytest.fixture
    def component(self):
        return JudgeReward


def test_an_async_judge_scores_the_batch_in_one_call_concurrently():
    judge = JudgeReward()
    calls = []
    inner = judge.score_batch

    async def counted(responses, targets):
        calls.append(len(responses))
        return await inner(responses, targets)

    judge.score_batch = counted
    responses = [f"the answer is {i % 5}" for i in range(40)]  # 8 responses per prompt, 5 prompts
    targets = [str(i % 5) if i < 30 else "9" for i in range(40)]
    res = RewardPipeline([RewardEntry("judge", judge)]).score(responses, targets)
    assert calls == [40] and judge.requests == 10  # one call; each distinct (response, target) judged once
    assert judge.most_in_flight > 1  # the requests were in flight together
    np.testing.assert_array_equal(res.total, [1.0] * 30 + [0.0] * 10)
    assert not res.errors


def test_an_async_judge_runs_inside_a_running_event_loop():
    async def engine_with_its_own_loop():
        return RewardPipeline([RewardEntry("judge", JudgeReward())]).score(["x 4", "y"], ["4", "4"])

    assert asyncio.run(engine_with_its_own_loop()).total.tolist() == [1.0, 0.0]
