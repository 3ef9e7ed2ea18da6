"""The two-node test cluster's ports (ray_cluster.py): Ray refuses to start a node whose worker port range
holds another of its ports, which a range drawn among the kernel's single-port choices once did in CI."""

from __future__ import annotations

import socket

import pytest

from .ray_cluster import WORKER_PORT_SPAN, WORKER_PORTS, free_port_ranges, free_ports


def _bound_in(low: int, high: int) -> socket.socket:
    """A socket bound to a port of [low, high): a port in use where the ranges are drawn."""
    for port in range(low, high):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
            return s
        except OSError:
            s.close()
    raise RuntimeError(f"no free port in [{low}, {high})")


def test_worker_port_ranges_hold_no_other_chosen_port_and_no_port_in_use():
    singles = free_ports(14)
    assert all(not WORKER_PORT_SPAN[0] <= p < WORKER_PORT_SPAN[1] for p in singles)  # the kernel's range: apart
    span = (30000, 30400)  # a small span: the draws must step around what is taken and what is in use
    with _bound_in(30090, 30110) as busy:
        in_use = busy.getsockname()[1]
        taken = set(singles) | {30040}
        starts = free_port_ranges(2, taken, span=span)
        blocks = [set(range(s, s + WORKER_PORTS)) for s in starts]
        assert blocks[0].isdisjoint(blocks[1])
        for block in blocks:
            assert len(block) == WORKER_PORTS and min(block) >= span[0] and max(block) < span[1]
            assert block.isdisjoint(taken) and in_use not in block


def test_a_span_whose_every_range_holds_a_port_in_use_yields_none():
    span = (31000, 31300)
    held = []
    try:
        for port in range(span[0] + 50, span[1], 50):  # gaps of 49: no 51 free ports in a row
            s = socket.socket()
            held.append(s)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                pass  # in use already: as good
        with pytest.raises(RuntimeError, match="no 1 ranges of 51 free ports"):
            free_port_ranges(1, set(), span=(span[0] + 50, span[1]))
    finally:
        for s in held:
            s.close()
