"""The Custom Scalars layout, read back from a simulated run's event file, matches what the run logged."""

from __future__ import annotations

import re

from .monitoring_helpers import metric_keys


def read_layout(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.custom_scalar import layout_pb2, metadata

    acc = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    tag = "custom_scalars__config__"
    assert acc.SummaryMetadata(tag).plugin_data.plugin_name == metadata.PLUGIN_NAME
    layout = layout_pb2.Layout.FromString(acc.Tensors(tag)[0].tensor_proto.string_val[0])
    return layout, set(acc.Tags()["scalars"])


def test_layout_has_the_documents_categories_and_every_chart_matches_logged_keys(demo_run):
    layout, scalar_tags = read_layout(demo_run)
    assert scalar_tags == {k for k in metric_keys(demo_run)}  # one scalar per logged metric key
    categories = {c.title: c for c in layout.category}
    assert list(categories)[:3] == ["Reward Signals", "Training Dynamics", "Contributions"]
    assert {"Alerts", "source", "filter", "curriculum"} <= set(categories)
    matched: dict[str, set[str]] = {}
    for cat in layout.category:
        for chart in cat.chart:
            regexes = list(chart.multiline.tag)
            assert regexes, chart.title
            for rx in regexes:
                hits = {t for t in scalar_tags if re.search(rx, t)}
                assert hits, f"{cat.title} / {chart.title}: {rx!r} matches no scalar the demo run logged"
                matched[chart.title] = matched.get(chart.title, set()) | hits
    funcs = {"format_exact", "format_approx", "check_answer", "check_numbers"}
    assert matched["Per-Function Rewards"] == {f"rewards/functions/{f}" for f in funcs}
    assert matched["Per-Function Reward Std"] == {f"rewards/functions/{f}_std" for f in funcs}
    assert matched["Reward Contributions (%) by function"] == {f"contributions/{f}" for f in funcs}
    assert matched["Policy Metrics (KL, entropy)"] == {
        "training/kl_divergence", "training/policy_update_kl", "training/policy_entropy"}
    assert matched["Advantages (mean, std)"] == {"training/advantage_mean", "training/advantage_std"}
    sources = {"arith_add", "arith_mul", "chain", "logic"}
    assert matched["weight by source"] == {f"sampler/weight/{s}" for s in sources}
    assert matched["reward by source (trained)"] == {f"source/{s}/reward" for s in sources}


def test_source_charts_match_names_with_slashes():
    from rlhooks.plugins.backends.tensorboard_backend import LAYOUT

    rx = LAYOUT["source"]["reward by source (trained)"][1][0]
    assert re.search(rx, "source/gsm8k/main v2/reward") and not re.search(rx, "source/gsm8k/main v2/generated_reward")
