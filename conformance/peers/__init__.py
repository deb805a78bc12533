"""Peers: the suite's cases run through another sharding system, compared rank by rank.

    spec          a peer case (mesh, mesh view, placements, op, dtype, data), drawn
                  from a stream of draws (so conformance.shrink shrinks it), its
                  meaning and every rank's expected block
    refir_side    the case as a refir program, run on spmd once per group
    dtensor_peer  torch DTensor, all ranks in one process (LocalTensorMode, "fake" group)
    jax_peer      JAX on the CPU, 8 host devices (NamedSharding, shard_map collectives)
    scripts, jax_script  standalone reproducers that use the peer alone
    known         known conventions and peer bugs (docs/peers.md)
    sweep         draw, run both sides, compare, shrink, triage, write reproducers
    cli           `python -m refir peer dtensor|jax`

A peer module imports its framework lazily: refir never needs torch or jax.
Every peer has the same small interface (`Peer`): `available()` says why not,
`run(case)` gives each rank's block, `script(case)` a standalone reproducer.
"""

from __future__ import annotations

import importlib
from typing import Protocol

from conformance.peers.spec import Blocks, PeerCase
from refir.errors import InputError

NAMES = ("dtensor", "jax")
INSTALL = "pip install 'refir[peers]'"


class Peer(Protocol):
    NAME: str
    DTYPES: tuple[str, ...]
    EVEN_ONLY: bool  # refuses extents that do not divide
    FEATURES: tuple[str, ...]  # mesh views it has: root, slice, flatten
    KINDS: tuple[str, ...]  # case kinds it runs: reshard, op, collective
    NESTS: bool  # takes a tensor dim sharded on several mesh dims (refir's nests, spec §3.2)

    def available(self) -> str:
        """'' when the framework imports, else why not."""
        ...

    def versions(self) -> str: ...

    def run(self, case: PeerCase) -> Blocks:
        """Every rank's block of the case's result, as the peer computes it."""
        ...

    def script(self, case: PeerCase) -> str:
        """A standalone Python script that runs the case on the peer alone and
        asserts the blocks the global meaning says (fails while they differ)."""
        ...


class PeerMissing(InputError):
    pass


def load_peer(name: str) -> Peer:
    if name not in NAMES:
        raise InputError(f"unknown peer {name!r} (known: {', '.join(NAMES)})")
    peer = importlib.import_module(f"conformance.peers.{name}_peer")
    why = peer.available()
    if why:
        raise PeerMissing(f"peer {name}: {why}; install the peers with: {INSTALL} (docs/peers.md)")
    return peer
