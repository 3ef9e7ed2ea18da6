"""The three samplers pass rlhooks' own contract-test kit (as a third-party sampler would)."""

from __future__ import annotations

import pytest

from rlhooks.plugins.samplers.curriculum import RewardCurriculumSampler, TimeCurriculumSampler
from rlhooks.plugins.samplers.multi_source import MultiSourceSampler
from rlhooks.testing import SamplerContract
from rlhooks.testing.components import _IndexStream
from rlhooks.testing.factories import make_dataset

ADAPTIVE = {"adaptive_weights": True, "update_frequency": 1, "temperature": 0.5}
# the kit's default dataset has sources gsm8k, math, code; "code" is the curriculum source
CURRICULUM = "code"


class _CurriculumData:
    @pytest.fixture
    def single_source_data(self):
        """The kit's single-source check: the one source must be the curriculum source."""
        return make_dataset(30, sources=(CURRICULUM,), seed=1)


class TestMultiSourceContract(SamplerContract):
    plugin_class = MultiSourceSampler

    @pytest.fixture
    def component_options(self):
        return dict(ADAPTIVE)

    @pytest.fixture
    def entry_point_name(self):
        return "multi_source"


class TestTimeCurriculumContract(_CurriculumData, SamplerContract):
    plugin_class = TimeCurriculumSampler

    @pytest.fixture
    def component_options(self):
        return {**ADAPTIVE, "complexity_source": CURRICULUM, "complexity_warmup_steps": 3}

    @pytest.fixture
    def entry_point_name(self):
        return "time_curriculum"


class TestRewardCurriculumContract(_CurriculumData, SamplerContract):
    plugin_class = RewardCurriculumSampler

    @pytest.fixture
    def component_options(self):
        return {**ADAPTIVE, "complexity_source": CURRICULUM, "reward_threshold": 0.2, "min_batches_per_level": 1,
                "check_frequency": 1, "focus_new_intervals": True}

    @pytest.fixture
    def entry_point_name(self):
        return "RewardCurriculumSampler"


class TestRewardCurriculumAccuracyGateContract(_CurriculumData, SamplerContract):
    """The curriculum gated on the kit's ``acc`` reward extra (half its groups correct): levels move."""

    plugin_class = RewardCurriculumSampler

    @pytest.fixture
    def component_options(self):
        return {"complexity_source": CURRICULUM, "gate_metric": "acc", "reward_threshold": 0.3,
                "min_batches_per_level": 1, "check_frequency": 1}

    @pytest.fixture
    def entry_point_name(self):
        return "reward_curriculum"


class TestRewardCurriculumValidationGateContract(_CurriculumData, SamplerContract):
    """The curriculum gated on held-out accuracy (``validation/score``): the kit's round trip delivers
    validation results to a sampler with on_validation_end, and the levels move."""

    plugin_class = RewardCurriculumSampler

    @pytest.fixture
    def component_options(self):
        return {"complexity_source": CURRICULUM, "gate_metric": "validation/score", "reward_threshold": 0.3,
                "min_batches_per_level": 1}

    @pytest.fixture
    def entry_point_name(self):
        return "reward_curriculum"

    def test_the_kits_validation_results_move_the_levels(self, sampler_factory, batch_size, trajectory_batch_factory):
        s = sampler_factory(seed=4)
        self._feedback(s, _IndexStream(s), batch_size, trajectory_batch_factory, steps=12)
        assert s.level >= 2 and s.state_dict()["extra"]["validation_step"] == 12
