"""Alerts as episodes: one entry per run of consecutive firing steps, with its duration and peak."""

from __future__ import annotations

from rlhooks.monitoring.alerts import AlertManager, AlertSpec, episodes_from_rows


def test_an_alert_is_one_episode_per_run_of_firing_steps_with_its_peak():
    mgr = AlertManager([AlertSpec(metric="filter/kept_ratio", condition="less", threshold=0.5),
                        AlertSpec(metric="rewards/mean", condition="greater", threshold=5.0, level="critical")])
    kept = {1: 0.9, 2: 0.4, 3: 0.2, 4: 0.3, 5: 0.8, 6: 0.1, 7: 0.1}
    rows = []
    for step, k in kept.items():
        rows += [a.row() for a in mgr.check(step, {"filter/kept_ratio": k, "rewards/mean": 6.0 + step})]
    eps = mgr.summary()["episodes"]
    kept_eps = [e for e in eps if e["metric"] == "filter/kept_ratio"]
    assert [(e["start"], e["end"], e["steps"], e["peak"], e["ongoing"]) for e in kept_eps] == [
        (2, 4, 3, 0.2, False), (6, 7, 2, 0.1, True)]
    (mean_ep,) = [e for e in eps if e["metric"] == "rewards/mean"]
    assert (mean_ep["start"], mean_ep["end"], mean_ep["peak"], mean_ep["level"]) == (1, 7, 13.0, "critical")
    # the logged rows (one per firing step) group into the same episodes
    from_rows = episodes_from_rows(rows)
    assert [(e["metric"], e["start"], e["end"], e["steps"], e["peak"]) for e in from_rows] == [
        (e["metric"], e["start"], e["end"], e["steps"], e["peak"]) for e in sorted(eps, key=lambda e: e["start"])]
    # resumable: a restored manager continues the open episode
    again = AlertManager(mgr.specs)
    again.load_state_dict(mgr.state_dict())
    again.check(8, {"filter/kept_ratio": 0.05, "rewards/mean": 1.0})
    last = [e for e in again.summary()["episodes"] if e["metric"] == "filter/kept_ratio"][-1]
    assert (last["start"], last["end"], last["steps"], last["peak"]) == (6, 8, 3, 0.05)
    assert [e for e in again.summary()["episodes"] if e["metric"] == "rewards/mean"][0]["ongoing"] is False
