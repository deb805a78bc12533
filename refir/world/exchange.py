"""Inputs out to the ranks and results back, when each rank is an MPI process.

Rank 0 holds the global inputs. A rank given the inputs too slices its own
blocks from them (views, as in one process); a rank given none receives from
rank 0 exactly the blocks its devices need, dense in their declared layout.
Results come back to rank 0 only (every rank, when asked): each buffer travels
as raw bytes, dense in its own memory order, with that order, so that its
strides are restored on arrival. Nothing large is pickled; every wait is
bounded (refir.world.mpi_job.wait), and errors are agreed so that every rank stops alike.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Collection
from typing import Any

import numpy as np
from mpi4py import MPI

from refir.checks.footprint import EVERY, RunKind
from refir.checks.verifier import Checked
from refir.errors import InputError
from refir.ir.types import block_index, block_shape, global_shape, memory_order, receive_into, wire_bytes
from refir.running.prepare import bind_and_check, host_arrays
from refir.running.shard_inputs import held_by, shard_inputs
from refir.world.backend_types import Shards
from refir.world.mpi_job import COMMS, agreed, allgather_obj, as_agreed, bcast_obj, fault, recv_bytes, wait
from refir.world.ranks import World

INPUT_TAG, HEADER_TAG, RESULT_TAG = 41, 42, 43


# ---- inputs ----------------------------------------------------------------------------

def settle(checked: Checked, inputs: dict[str, Any], step: Callable[[], Any],
           kind: RunKind = EVERY) -> tuple[Any, dict[str, np.ndarray], dict[str, int], list[int]]:
    """Check the inputs given to this rank and run `step()` (the world, the
    lowering) on every rank, in one exchange: any error stops every rank, rank
    0's bindings hold everywhere. Returns `step()`'s value, this rank's inputs
    as numpy arrays, the bindings and the ranks that were given no inputs."""
    comm = COMMS.world()

    def check() -> tuple[dict[str, int] | None, dict[str, np.ndarray], Any]:
        if comm.rank == 0 and not inputs:
            raise InputError("under MPI, rank 0 must be given the inputs (other ranks may be given none)")
        arrays = host_arrays(inputs)
        return (bind_and_check(checked, arrays, kind) if arrays else None), arrays, step()

    (_, arrays, value), every = agreed(comm, "every rank to check the program and its inputs", check,
                                       lambda v: v[0], reuse=True)
    differ = [k for k, b in enumerate(every) if b is not None and b != every[0]]
    if differ:
        raise as_agreed(InputError(f"rank {differ[0]} was given inputs of other extents than rank 0's "
                                   f"({every[differ[0]]} against {every[0]})"))
    return value, arrays, dict(every[0]), [k for k, b in enumerate(every) if b is None]  # a copy: the caller's


def deliver_inputs(checked: Checked, inputs: dict[str, np.ndarray], bindings: dict[str, int], world: World,
                   needy: list[int]) -> Shards:
    """Each needy rank's blocks, from rank 0; other ranks keep their own."""
    fault("inputs")
    shards: Shards = shard_inputs(checked, inputs, world.hosted) if inputs else {}
    if not needy:  # every rank was given the inputs: nothing travels
        return shards
    comm = COMMS.world()
    reqs: list[MPI.Request] = []
    terms: dict[tuple[str, int], np.ndarray] = {}
    for p in checked.func.params:
        t = p.type
        shape = global_shape(t, bindings)
        for k in needy:
            if k not in t.mesh:
                continue
            index = block_index(t, k, shape)
            if world.is_root:
                held = held_by(t, p.name, inputs[p.name], k, terms)  # a partial input's term
                reqs.append(comm.Isend(wire_bytes(held[index + (Ellipsis,)], t.order), dest=k,
                                       tag=INPUT_TAG))
            elif k == world.rank:
                x, buf = receive_into(block_shape(shape, index), t.np_dtype, t.order)
                reqs.append(comm.Irecv(buf, source=0, tag=INPUT_TAG))
                shards.setdefault(p.name, {})[k] = x
    for p in checked.func.params:
        shards.setdefault(p.name, {})
    wait(reqs, "the inputs from rank 0" if not world.is_root else "ranks to take their inputs")
    return shards


# ---- results ---------------------------------------------------------------------------

Entry = tuple[str, int, Any, Any, Any]  # result, device, then shape, dtype, memory order (None: no buffer)


def entry(name: str, d: int, x: Any) -> Entry:
    """How a buffer travels: enough for the receiver to lay it out as it was."""
    if not isinstance(x, np.ndarray):
        return (name, d, None, None, None)
    return (name, d, x.shape, wire_dtype(x.dtype), memory_order(x))


def wire_dtype(dtype: np.dtype) -> str | np.dtype:
    """A dtype as a header carries it: its .str where that names it (a pickled
    dtype object costs ten times more to send), else the dtype itself
    (bfloat16's .str, '<V2', names no such type). np.dtype() reads either."""
    got = _WIRE_DTYPES.get(dtype)
    if got is None:
        got = _WIRE_DTYPES[dtype] = dtype.str if np.dtype(dtype.str) == dtype else dtype
    return got


_WIRE_DTYPES: dict[np.dtype, str | np.dtype] = {}


def receiver(e: Entry) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The array an entry arrives as, and its bytes to receive into (None, None: no buffer)."""
    return (None, None) if e[2] is None else receive_into(e[2], np.dtype(e[3]), e[4])


def receive_on_root(comm: MPI.Comm, headers: dict[int, list[Entry]], merged: Shards) -> None:
    """Rank 0 receives the buffers each rank k's `headers` announce into `merged`."""
    reqs = []
    for k, entries in headers.items():
        for e in entries:
            x, buf = receiver(e)
            merged.setdefault(e[0], {})[e[1]] = x
            if buf is not None:
                reqs.append(comm.Irecv(buf, source=k, tag=RESULT_TAG))
    wait(reqs, "the results on rank 0")


def collect_results(shards: Shards, world: World) -> Shards:
    """Every rank's result buffers on rank 0, and then on every rank. Strides
    are kept; a rank's own buffers stay as they are; a buffer the backend did
    not return arrives as None. Point-to-point: a small header per rank, then
    the buffers' bytes (gather_to_root, below, serves rank 0 alone)."""
    comm = COMMS.world()
    fault("gather")
    merged: Shards = {name: dict(bufs) for name, bufs in shards.items()}
    if world.is_root:
        headers = {k: pickle.loads(recv_bytes(comm, k, HEADER_TAG, f"rank {k}'s results").tobytes())
                   for k in range(1, comm.size)}
        receive_on_root(comm, headers, merged)
    else:
        sent = [(entry(name, d, x), x) for name, bufs in shards.items() for d, x in bufs.items()]
        reqs = [comm.Isend(np.frombuffer(pickle.dumps([e for e, _ in sent]), np.uint8), dest=0, tag=HEADER_TAG)]
        reqs += [comm.Isend(wire_bytes(x, e[4]), dest=0, tag=RESULT_TAG) for e, x in sent if e[2] is not None]
        wait(reqs, "rank 0 to take the results")
    return share_from_root(merged, comm)


def gather_to_root(shards: Shards, world: World, wanted: Collection[tuple[str, int]],
                   vet: Callable[[list[list[Entry]]], Exception | None],
                   meanwhile: Callable[[], None] | None = None) -> Shards:
    """The `wanted` (result, device) buffers of other ranks on rank 0, in one
    round of headers and then the buffers' bytes. Every rank's headers (its
    wanted buffers, rank 0's own, and every buffer the backend did not return)
    reach every rank, which `vet`s them alike: an error found there (a missing
    or misshapen block) stops every rank with it, so rank 0 needs no second
    round to tell the others that it could assemble the results. `meanwhile`
    runs while the headers travel (allgather_obj)."""
    comm = COMMS.world()
    fault("gather")
    mine = [(entry(name, d, x), x) for name, bufs in shards.items() for d, x in bufs.items()
            if world.is_root or (name, d) in wanted or not isinstance(x, np.ndarray)]
    every = allgather_obj(comm, [e for e, _ in mine], "every rank's result headers", meanwhile, reuse=True)
    error = vet(every)
    if error is not None:
        raise as_agreed(error)
    merged: Shards = {name: dict(bufs) for name, bufs in shards.items()}
    if world.is_root:
        receive_on_root(comm, dict(enumerate(every[1:], 1)), merged)
    else:
        reqs = [comm.Isend(wire_bytes(x, e[4]), dest=0, tag=RESULT_TAG) for e, x in mine if e[2] is not None]
        wait(reqs, "rank 0 to take the results")
    return merged


def share_from_root(shards: Shards, comm: MPI.Comm) -> Shards:
    """Rank 0's buffers on every rank, strides preserved (for results asked everywhere)."""
    entries = [entry(name, d, x) for name, bufs in shards.items() for d, x in bufs.items()] if comm.rank == 0 else None
    out: Shards = {}
    reqs = []
    for e in bcast_obj(comm, entries, 0, "rank 0's result headers"):
        x, buf = (shards[e[0]][e[1]], None) if comm.rank == 0 else receiver(e)
        if e[2] is not None:
            reqs.append(comm.Ibcast(wire_bytes(x, e[4]) if comm.rank == 0 else buf, root=0))
        out.setdefault(e[0], {})[e[1]] = x
    wait(reqs, "the results from rank 0")
    return out


def share_arrays(arrays: dict[str, np.ndarray] | None, comm: MPI.Comm) -> dict[str, np.ndarray]:
    """Rank 0's named arrays on every rank."""
    got = share_from_root({"": dict(enumerate(arrays.values()))} if comm.rank == 0 else {}, comm)
    names = bcast_obj(comm, list(arrays) if comm.rank == 0 else None, 0, "result names")
    return {n: got.get("", {})[k] for k, n in enumerate(names)}
