"""Which members of a team share a node, for the paths that need shared
memory (interp/mpi/shared_windows.py's windows and result slots): where every
member does, a collective may take them; where the team spans nodes, it takes
MPI's own collectives on the team's communicator.

A node is the machine's (MPI's split by shared memory), or, under
REFIR_MPI_NODE_RANKS=K, a simulated one: world ranks 0..K-1 form the first,
K..2K-1 the next, and so on (within the machine's nodes: a simulated node
never spans two real ones). K=1 puts every rank on a node of its own, so every
collective takes the path it would take across nodes, on one machine, where
tests and benchmarks can run it (docs/switches.md). The rule is read once, at
import (under the command line, refir.env.check_all has refused a bad value on
every rank first); `simulated` changes it for a while (benchmarks, tests).

The gpu backend's rank transport has no shared-memory path to rule out: under
the simulator its wire is MPI's own collectives on every node, and on GPUs
NCCL picks its own; it picks each rank's GPU by the machine's node
(gpu_backend/device.py), which a simulated node must not change.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from mpi4py import MPI

from refir import env
from refir.world.mpi_job import barrier

NODE_RANKS: int | None = env.node_ranks()


def rule() -> str:
    """A name for the node rule in force, part of what keys a team's windows
    (a rule changed by `simulated` finds windows of its own)."""
    return "" if NODE_RANKS is None else f", nodes of {NODE_RANKS}"


def one_node(comm: MPI.Comm, devices: tuple[int, ...]) -> bool:
    """Whether every member of the team (`comm`, whose ranks are the world
    ranks `devices` in team order) runs on one node: the same answer on every
    member (collective where the machine is asked)."""
    if NODE_RANKS is not None and len({d // NODE_RANKS for d in devices}) > 1:
        return False  # on simulated nodes of their own: known from the devices alone, on every member
    barrier(comm)  # every member is here (within the timeout) before the blocking call below
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    one = node.size == comm.size
    node.Free()
    return one


@contextmanager
def simulated(node_ranks: int | None) -> Iterator[None]:
    """Run the body under another node rule (None: the machine's nodes), on
    every rank alike."""
    global NODE_RANKS
    kept, NODE_RANKS = NODE_RANKS, node_ranks
    try:
        yield
    finally:
        NODE_RANKS = kept
