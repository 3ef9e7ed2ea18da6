"""Per-source metric keys: any source name (slashes, spaces, dots, unicode) round-trips."""

from __future__ import annotations

import pytest

from rlhooks.core.metrics import source_key, split_source_key

NAMES = ["openai/gsm8k", "lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "gsm8k", "my data v1.2",
         "a/b/c/d", "数学/题库", "x/count", " padded ", "..", "source/nested"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("metric", ["count", "reward", "generated_acc", "acc.mean"])
def test_split_source_key_round_trips_any_source_name(name, metric):
    assert split_source_key(source_key(name, metric)) == (name, metric)


def test_other_keys_are_not_source_keys():
    for key in ("rewards/mean", "source", "source/", "source/x", "source//count", "source/x/", "sources/x/count"):
        assert split_source_key(key) is None, key
    with pytest.raises(ValueError, match="cannot contain '/'"):
        source_key("x", "a/b")
