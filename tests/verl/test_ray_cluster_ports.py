"""The two-node test cluster's ports (ray_cluster.py): Ray refuses to start a node whose worker port range
holds another of its ports, which a range drawn among the kernel's single-port choices once did in CI."""

from __future__ import annotations

import socket

from .ray_cluster import WORKER_PORT_SPAN, WORKER_PORTS, free_port_ranges, free_ports


def test_worker_port_ranges_hold_no_other_chosen_port_and_no_port_in_use():
    singles = free_ports(14)
    taken = set(singles) | set(range(WORKER_PORT_SPAN[0], 25000))  # most of the span: the draws must avoid it
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        starts = free_port_ranges(2, taken)
        blocks = [set(range(s, s + WORKER_PORTS)) for s in starts]
        assert all(len(b) == WORKER_PORTS for b in blocks)
        assert blocks[0].isdisjoint(blocks[1])
        for block in blocks:
            assert block.isdisjoint(taken)
            assert busy.getsockname()[1] not in block
            assert max(block) < WORKER_PORT_SPAN[1]
