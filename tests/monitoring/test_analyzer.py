"""RewardAnalyzer: quality dimensions by their documented formulas, importance, hacking, JSONL read-back."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rlhooks import Batch
from rlhooks.host import RunManager, load_config
from rlhooks.monitoring.analyzer import AnalyzerError, RewardAnalyzer


def step_metrics(mean, std, lo, hi, **extra):
    return {"rewards/mean": mean, "rewards/std": std, "rewards/min": lo, "rewards/max": hi, **extra}


HISTORY = [
    (1, step_metrics(1.0, 1.0, -1.0, 3.0)),
    (2, step_metrics(1.5, 0.5, 0.0, 3.0)),
    (3, step_metrics(1.2, 1.5, -1.0, 3.0)),
    (4, step_metrics(2.0, 1.0, 0.0, 2.0)),
]


def test_quality_dimensions_follow_the_documented_formulas():
    means = [1.0, 1.5, 1.2, 2.0]
    stds = [1.0, 0.5, 1.5, 1.0]
    los, his = [-1.0, 0.0, -1.0, 0.0], [3.0, 3.0, 3.0, 2.0]
    diffs = [b - a for a, b in zip(means, means[1:])]
    dmean = sum(diffs) / 3
    sd_diffs = math.sqrt(sum((d - dmean) ** 2 for d in diffs) / 3)
    avg_std = sum(stds) / 4
    consistency = math.exp(-sd_diffs / avg_std)
    discriminability = sum(min(1.0, s / ((h - lo) / 2)) for s, lo, h in zip(stds, los, his)) / 4
    sd_std = math.sqrt(sum((s - avg_std) ** 2 for s in stds) / 4)
    stability = 1 / (1 + sd_std / avg_std)
    coverage = sum((h - lo) / (3.0 - -1.0) for lo, h in zip(los, his)) / 4  # observed run range
    score = 100 * (0.25 * consistency + 0.35 * discriminability + 0.25 * stability + 0.15 * coverage)

    r = RewardAnalyzer(HISTORY).analyze_quality()
    assert r.consistency == pytest.approx(consistency)
    assert r.discriminability == pytest.approx(discriminability)
    assert r.stability == pytest.approx(stability)
    assert r.coverage == pytest.approx(coverage)
    assert r.quality_score == pytest.approx(score, abs=1e-3)
    assert r.n_steps == 4 and r.issues == []

    # with a declared possible range, coverage is relative to it
    r2 = RewardAnalyzer(HISTORY, reward_range=(-4.0, 12.0)).analyze_quality()
    assert r2.coverage == pytest.approx(sum((h - lo) / 16 for lo, h in zip(los, his)) / 4)
    assert any("coverage" in i for i in r2.issues) and len(r2.recommendations) == len(r2.issues)


def test_constant_rewards_are_flagged():
    hist = [(s, step_metrics(2.0, 0.0, 2.0, 2.0)) for s in range(1, 6)]
    r = RewardAnalyzer(hist).analyze_quality()
    assert r.discriminability == 0.0 and r.coverage == 0.0
    assert any("barely separate" in i for i in r.issues)
    assert any("dapo" in rec for rec in r.recommendations)


def test_short_and_empty_histories():
    r = RewardAnalyzer(HISTORY[:2]).analyze_quality()
    assert any("only 2 step" in i for i in r.issues)
    with pytest.raises(AnalyzerError, match="enable the reward_monitor"):
        RewardAnalyzer([(1, {"loss": 1.0})]).analyze_quality()


def test_function_importance():
    hist = [
        (s, {"rewards/mean": t, "rewards/functions/a": a, "rewards/functions/a_std": sa,
             "rewards/functions/b": b, "rewards/functions/b_std": sb,
             "rewards/functions/c_std": 0.0})  # a function literally named "c_std" ...
        for s, (t, a, sa, b, sb) in enumerate([(1.0, 1.0, 1.0, 0.0, 0.0), (2.0, 2.0, 1.0, 0.0, 0.0),
                                               (2.5, 3.0, 3.0, -0.5, 1.0)], 1)
    ]
    imp = RewardAnalyzer(hist).analyze_function_importance()
    assert set(imp) == {"a", "b", "c_std"}  # ... is a function, since "c" does not exist
    assert imp["a"]["mean"] == pytest.approx(2.0) and imp["b"]["mean"] == pytest.approx(-0.5 / 3)
    ma, mb = (1 + 2 + 3) / 3, (0 + 0 + 0.5) / 3  # mean |value|, no contributions/ metrics logged
    assert imp["a"]["contribution"] == pytest.approx(100 * ma / (ma + mb))
    va, vb = (1 + 1 + 9) / 3, 1 / 3
    assert imp["a"]["variance_share"] == pytest.approx(100 * va / (va + vb))
    assert imp["a"]["correlation"] == pytest.approx(np.corrcoef([1, 2, 3], [1, 2, 2.5])[0, 1])
    # logged contributions/ metrics are used when present
    hist2 = [(1, {"rewards/functions/a": 1.0, "contributions/a": 70.0}), (2, {"rewards/functions/a": 1.0, "contributions/a": 80.0})]
    assert RewardAnalyzer(hist2).analyze_function_importance()["a"]["contribution"] == pytest.approx(75.0)


def rising_history(n=10, kl=None, perf=None):
    out = []
    for i in range(n):
        m = step_metrics(1.0 + 0.2 * i, 1.0, 0.0, 3.0, **{"rewards/functions/fmt": 0.1 * i, "rewards/functions/ans": 1.0})
        if kl is not None:
            m["training/kl_divergence"] = kl(i)
        if perf is not None:
            m["val/acc"] = perf(i)
        out.append((i + 1, m))
    return out


def test_reward_hacking_reward_rises_but_performance_does_not():
    an = RewardAnalyzer(rising_history(perf=lambda i: 0.5 - 0.01 * i))
    rep = an.detect_reward_hacking("val/acc")
    assert rep.detected and "val/acc is not" in rep.reasons[0]
    assert rep.suspect_functions == ["fmt"]  # the rising component; "ans" is flat
    assert rep.reward_trend == pytest.approx(1.0)
    # performance rising with the reward: no hacking
    assert not RewardAnalyzer(rising_history(perf=lambda i: 0.3 + 0.05 * i)).detect_reward_hacking("val/acc").detected
    # an explicit series works too
    assert RewardAnalyzer(rising_history()).detect_reward_hacking([0.5] * 10).detected


def test_reward_hacking_kl_rises_much_faster_than_reward():
    rep = RewardAnalyzer(rising_history(kl=lambda i: 0.01 * 2 ** i)).detect_reward_hacking()
    assert rep.detected and "KL grew" in rep.reasons[0] and rep.kl_growth > 3 * rep.reward_growth
    rep = RewardAnalyzer(rising_history(kl=lambda i: 1.0 + 0.01 * i)).detect_reward_hacking()
    assert not rep.detected and rep.kl_growth == pytest.approx(0.09 / np.mean([1.0 + 0.01 * i for i in range(10)]))


def test_from_jsonl_reads_only_metrics_lines(tmp_path):
    lines = [
        {"kind": "run_start", "config": {"run": {}}},
        *[{"kind": "metrics", "step": s, "metrics": {**m, "note": None}} for s, m in HISTORY],
        {"kind": "table", "step": 2, "name": "alerts", "rows": [{"a": 1}]},
        {"kind": "histogram", "step": 2, "name": "rewards/distribution", "values": [1.0]},
        {"kind": "run_end", "status": "success"},
    ]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"kind": "metr')  # unfinished last line
    an = RewardAnalyzer.from_jsonl(tmp_path)
    assert an.steps == [1, 2, 3, 4]
    assert an.analyze_quality() == RewardAnalyzer(HISTORY).analyze_quality()


def test_from_jsonl_errors(tmp_path):
    with pytest.raises(AnalyzerError, match="cannot read metrics file"):
        RewardAnalyzer.from_jsonl(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind": "metrics", "step": 1, "metrics": {}}\nnot json\n{"kind": "run_end"}\n')
    with pytest.raises(AnalyzerError, match=r"bad.jsonl:2: not valid JSON"):
        RewardAnalyzer.from_jsonl(bad)
    bad.write_text('{"kind": "metrics", "step": "one", "metrics": {}}\n')
    with pytest.raises(AnalyzerError, match="integer 'step'"):
        RewardAnalyzer.from_jsonl(bad)


def test_saved_run_analysis_matches_the_monitors_run_end_report(tmp_path):
    """A real run with the JSONL backend: the analyzer on the saved file equals the monitor's summary."""
    cfg = load_config({
        "run": {"name": "saved", "out_dir": str(tmp_path)},
        "rewards": ["check_answer", "format_exact", "reward_monitor"],
        "backends": ["jsonl"],
    })
    m = RunManager(cfg)
    rng = np.random.default_rng(0)
    with m.running():
        for step in range(1, 7):
            f1 = rng.choice([-1.0, 0.5, 3.0], 16)
            f2 = rng.choice([0.0, 3.0], 16)
            batch = Batch({"uid": np.repeat(np.arange(4), 4).astype(str), "reward": f1 + f2,
                           "reward_fn/check_answer": f1, "reward_fn/format_exact": f2},
                          meta={"reward_functions": ["check_answer", "format_exact"]})
            m.rewards_computed(step, batch)
            merged = {"actor/kl_loss": 0.01 * step, **m.step_end(step, batch, {"actor/kl_loss": 0.01 * step})}
            m.log_metrics(step, merged)
            m.dispatch_emitted()
    summary = json.loads((tmp_path / "saved" / "reward_monitor.json").read_text())
    an = RewardAnalyzer.from_jsonl(tmp_path / "saved", reward_range=(-1.0, 6.0))  # check_answer + format_exact ranges
    assert an.steps == list(range(1, 7))
    assert an.analyze_quality().to_dict() == summary["quality"]  # JSON round-trips floats exactly
    assert an.analyze_function_importance() == summary["function_importance"]
    assert an.detect_reward_hacking().to_dict() == summary["reward_hacking"]  # KL x6, reward flat


def _hist(reward, task, name="task/acc", std=1.0):
    return [(i + 1, {"rewards/mean": r, "rewards/std": std, name: t}) for i, (r, t) in enumerate(zip(reward, task))]


def test_hacking_verdict_weighs_the_task_signal_it_finds():
    rng = np.random.default_rng(0)
    n = 30
    up = np.linspace(5, 9, n)
    noise = rng.normal(0, 0.01, n)
    learning = RewardAnalyzer(_hist(up, np.linspace(0.3, 0.8, n) + noise)).detect_reward_hacking()
    assert learning.task_signal == "task/acc" and not learning.detected and learning.confidence == "high"
    assert learning.verdict.startswith("no reward hacking (high confidence): task/acc rose from 0.3")
    falling = RewardAnalyzer(_hist(up, np.linspace(0.5, 0.2, n) + noise)).detect_reward_hacking()
    assert falling.detected and falling.confidence == "high" and "task/acc fell" in falling.reasons[0]
    assert falling.evidence["task_change_in_se"] < -2 and falling.evidence["reward_rise_in_std"] > 2
    flat = RewardAnalyzer(_hist(up, 0.5 + noise)).detect_reward_hacking()
    assert flat.detected and flat.confidence == "medium"  # stalled, not fallen
    # verl's validation accuracy is found too, and an explicit name wins over task/acc
    assert RewardAnalyzer(_hist(up, up, name="val-core/gsm8k/acc/mean@1")).task_signal() == "val-core/gsm8k/acc/mean@1"


def test_a_late_shortcut_is_caught_after_the_task_peaked():
    rng = np.random.default_rng(1)
    task = np.r_[np.linspace(0.3, 0.7, 40), np.linspace(0.7, 0.2, 20)] + rng.normal(0, 0.01, 60)
    reward = np.r_[np.linspace(5, 8, 40), np.linspace(8, 11, 20)]
    rep = RewardAnalyzer(_hist(reward, task)).detect_reward_hacking()
    assert rep.detected and rep.confidence == "high" and "fell from its peak" in rep.reasons[0]
    assert rep.evidence["task_change_since_peak_in_se"] <= -3
    # the same rise and plateau without the fall is learning
    plateau = np.r_[np.linspace(0.3, 0.7, 40), np.full(20, 0.7)] + rng.normal(0, 0.01, 60)
    assert not RewardAnalyzer(_hist(np.r_[np.linspace(5, 8, 40), np.full(20, 8.0)], plateau)).detect_reward_hacking().detected


def test_without_a_task_signal_the_kl_rule_speaks_with_low_confidence():
    rep = RewardAnalyzer(rising_history(kl=lambda i: 0.01 * 2 ** i)).detect_reward_hacking()
    assert rep.task_signal is None and rep.confidence == "low"
    assert rep.verdict.startswith("possible reward hacking (low confidence, no task signal")
    quiet = RewardAnalyzer(rising_history()).detect_reward_hacking()
    assert not quiet.detected and quiet.verdict.startswith("no sign of reward hacking (low confidence")


def test_a_run_too_short_to_judge_gets_no_verdict():
    """Issue 38 item 5: a 3-step run (KL grows from 0 at step 1 in every run) is too short to judge, not a warning."""
    from rlhooks.monitoring.analyzer import MIN_JUDGE_STEPS

    rep = RewardAnalyzer(rising_history(n=3, kl=lambda i: 0.01 * 2 ** i)).detect_reward_hacking()
    assert not rep.detected and rep.confidence == "none" and rep.evidence["too_short"]
    assert rep.verdict.startswith("too short to judge: 3 steps logged") and str(MIN_JUDGE_STEPS) in rep.verdict
    from rlhooks.report import hacking_class

    assert hacking_class(rep.to_dict()) == "unknown"  # the report does not show it as clear
    enough = RewardAnalyzer(rising_history(n=MIN_JUDGE_STEPS, kl=lambda i: 0.01 * 2 ** i)).detect_reward_hacking()
    assert enough.detected and enough.confidence == "low"  # from MIN_JUDGE_STEPS on, the KL rule speaks
