"""The nine communications on device buffers, against the spec
(interp.collectives.exchange through the numpy in-process transport): random
dtypes, extents, meshes in any device order, senders' blocks of any strides
and results in any declared layout. Values and bits must match exactly (the
float data is integer-valued, so even reductions in NCCL's own order agree).

In one process (every rank on one device); and one rank per MPI process, where
this file is the driver (`python -m mpi4py tests/test_gpu_collectives.py`):
the MPI wire under the simulator, NCCL on GPUs.
"""

import os
import sys
from math import prod

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from helpers import ROOT, run_mpi  # noqa: E402
from test_gpu_kernels import strided  # noqa: E402

from gpu_backend.buffers.buffer import download, upload  # noqa: E402
from gpu_backend.transports.in_process import DeviceInProcess, LaidOut, transport_for  # noqa: E402
from gpu_backend.transports.wires import MpiWire  # noqa: E402
from interp.spmd import NumpyTransport  # noqa: E402
from interp.transport import InProcess  # noqa: E402
from refir.ir import ops  # noqa: E402
from refir.ir.types import DTYPES, Axis, Mesh, TensorType, has_layout, local_shape  # noqa: E402
from refir.world.mpi_job import wait  # noqa: E402
from refir.world.ranks import mpi_world  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

KINDS = ("allgather", "gather", "scatter", "broadcast", "send_recv", "all_to_all", "allreduce", "reduce",
         "reduce_scatter")
REDUCING = ("allreduce", "reduce", "reduce_scatter")
Case = tuple[object, TensorType, TensorType, dict[int, np.ndarray]]


def case(seed: int, world: int) -> Case:
    """Communication number `seed % 9` of KINDS on a world of 2 or 4 ranks; its
    variant `seed // 9` picks the rank, the communicated axis and, for the
    reducing ones, floats summed or multiplied (non-integer: the fold order shows
    in the bits), integers and bool (bitwise too), or float max/min with NaN.
    Odd variants shard extents that do not divide by the mesh."""
    rng = np.random.default_rng(seed)
    kind, variant = KINDS[seed % len(KINDS)], seed // len(KINDS)
    devices = tuple(int(d) for d in rng.permutation(world))
    half = world // 2
    m = Mesh("m", (world,), devices)
    a, b = Mesh("a", (half,), devices[:half]), Mesh("b", (half,), devices[half:])
    one = Mesh("one", (1,), devices[-1:])
    rank = 2 + variant % 2 if kind == "all_to_all" else 1 + variant % 3
    extents = [int(rng.integers(1, 3)) * world for _ in range(rank)]
    if variant % 2:  # uneven: short and, below the mesh size, empty blocks (spec §3.1)
        extents = [n - int(rng.integers(1, world)) for n in extents]
    axis = variant % rank
    other = (axis + 1 + variant // 2 % (rank - 1)) % rank if rank > 1 else axis
    floats, integers = ["f16", "f32", "f64"], ["bool", "i8", "i16", "i32", "i64", "u8"]
    if kind not in REDUCING:
        name, reduce_kind = str(rng.choice(floats + integers)), ""
    elif variant % 3 == 0:
        name, reduce_kind = str(rng.choice(floats)), str(rng.choice(["sum", "prod"]))
    elif variant % 3 == 1:
        name = str(rng.choice(integers))
        reduce_kind = str(rng.choice(["max", "min", "band", "bor", "bxor"] + ["sum", "prod"] * (name != "bool")))
    else:
        name, reduce_kind = str(rng.choice(floats)), str(rng.choice(["max", "min"]))

    def typed(mesh: Mesh, shards: dict[int, str], partial: bool = False) -> TensorType:
        axes = tuple(Axis(n, shards.get(i)) for i, n in enumerate(extents))
        layout = tuple(int(x) for x in rng.permutation(rank))
        return TensorType(name, axes, mesh, layout, ("DIDx",) if partial else (), reduce_kind if partial else "")

    plans = {
        "allgather": lambda: (ops.Allgather(axis, "DIDx"), typed(m, {axis: "DIDx"}), typed(m, {})),
        "gather": lambda: (ops.Gather(axis), typed(a, {axis: "DIDx"}), typed(one if seed % 2 else b, {})),
        "scatter": lambda: (ops.Scatter(axis, devices[0]), typed(Mesh("r", (1,), devices[:1]), {}),
                            typed(m if seed % 2 else b, {axis: "DIDx"})),
        "broadcast": lambda: (ops.Broadcast(devices[0]), typed(a, {}), typed(b, {})),
        "send_recv": lambda: (ops.SendRecv(axis), typed(a, {axis: "DIDx"}), typed(b, {axis: "DIDx"})),
        "all_to_all": lambda: (ops.AllToAll("DIDx", other, axis), typed(m, {axis: "DIDx"}),
                               typed(m, {other: "DIDx"})),
        "allreduce": lambda: (ops.Allreduce(reduce_kind, ("DIDx",)), typed(m, {}, True), typed(m, {})),
        "reduce": lambda: (ops.Reduce(reduce_kind), typed(a, {}, True), typed(one, {})),
        "reduce_scatter": lambda: (ops.ReduceScatter(reduce_kind, "DIDx", axis), typed(m, {}, True),
                                   typed(m, {axis: "DIDx"})),
    }
    op, src, dst = plans[kind]()
    special = reduce_kind in ("", "max", "min")  # NaN, inf: only where the order cannot matter
    blocks = {}
    for d in src.mesh.devices:
        shape = local_shape(src, {}, d)
        blocks[d] = strided(rng, shape, DTYPES[name], special)
        if reduce_kind in ("sum", "prod") and name.startswith("f"):
            blocks[d][...] = rng.standard_normal(shape)  # a fold out of team order shows in the bits
    return op, src, dst, blocks


def pinned(number: int, world: int) -> Case:
    """Cases of the rank transport's chunked paths (gpu_backend/transports/rank_transport.py).
    Even all_to_alls, which move each piece straight into its place in the
    result: 0, pieces packed (columns of a row-major block) into a
    column-major result; 1, pieces sent from where they lie (dense in the
    result's order: one row of the split axis each) into a result laid out
    (2, 0, 1); 2, a team of half the devices. Integer-summing reduce_scatters
    from a source declared in another order than the wire's: 3, a column-major
    block over axis 0; 4, a block laid out (2, 1, 0) over axis 1. Under MPI the
    all_to_alls' pieces go in two chunks, and the reduce_scatters by a wire that
    reduces (NCCL; under the simulator, MPI's own) in two chunks."""
    if number >= 3:
        return pinned_reduce_scatter(number - 3, world)
    m = Mesh("m", (world,), tuple(range(world))[::-1])
    half = Mesh("h", (world // 2,), tuple(range(world // 2)))
    shapes = [(2 * world, 3 * world), (world, 2 * world, 2), (world, 2 * world)]
    split, concat = [(1, 0), (0, 1), (1, 0)][number]
    mesh = half if number == 2 else m
    layouts = [((0, 1), (1, 0)), ((0, 1, 2), (2, 0, 1)), ((1, 0), (0, 1))][number]

    def typed(shard: int, layout: tuple[int, ...]) -> TensorType:
        axes = tuple(Axis(n, "DIDx" if a == shard else None) for a, n in enumerate(shapes[number]))
        return TensorType("i32", axes, mesh, layout)

    src, dst = typed(concat, layouts[0]), typed(split, layouts[1])
    return ops.AllToAll("DIDx", split, concat), src, dst, in_layout(src, layouts[0])


def pinned_reduce_scatter(number: int, world: int) -> Case:
    m = Mesh("m", (world,), tuple(range(world))[::-1])
    shape, axis, layout = [((4 * world, 3), 0, (1, 0)), ((2, 3 * world, 5), 1, (2, 1, 0))][number]

    def typed(shard: int | None, partial: bool) -> TensorType:
        axes = tuple(Axis(n, "DIDx" if a == shard else None) for a, n in enumerate(shape))
        return TensorType("i32", axes, m, layout, ("DIDx",) if partial else (), "sum" if partial else "")

    src = typed(None, True)
    return ops.ReduceScatter("sum", "DIDx", axis), src, typed(axis, False), in_layout(src, layout)


def in_layout(src: TensorType, order: tuple[int, ...]) -> dict[int, np.ndarray]:
    """Every device's block, distinct integers, dense in `order`."""
    blocks = {}
    for d in src.mesh.devices:
        shape = local_shape(src, {}, d)
        dense = np.arange(d * 1000, d * 1000 + prod(shape), dtype=np.int32)
        blocks[d] = dense.reshape([shape[a] for a in order]).transpose(np.argsort(order))
    return blocks


PINNED = 5


def mismatches(got: dict[int, np.ndarray], want: dict[int, np.ndarray], dst: TensorType,
               exact: bool = True, kind: str = "") -> list[str]:
    """Bits equal (or, where NCCL folds in its own order, within the spec's
    bound), and every received buffer dense in the declared layout. A float
    max/min need only agree as values: NaN payloads and the sign of a zero it
    picks between +0 and -0 are not part of the spec (numpy itself differs by dtype)."""
    found = [f"device {d}: nothing received" for d in want if d not in got]
    for d, x in got.items():
        w = want[d]
        if x.shape != w.shape:
            same = False
        elif x.dtype.kind == "f" and kind in ("max", "min"):
            same = np.array_equal(x, w, equal_nan=True)
        elif exact:
            same = np.array_equal(x.view(f"u{x.itemsize}"), w.view(f"u{w.itemsize}"))
        else:
            bound = 8 * float(np.finfo(w.dtype).eps) * max(float(np.abs(w).max(initial=0)), 1.0)
            same = np.allclose(x, w, rtol=0, atol=bound, equal_nan=True)
        if not same:
            found.append(f"device {d}: values differ")
        elif not has_layout(x, dst.order):
            found.append(f"device {d}: strides {x.strides} are not dense in order {dst.order}")
    return found


def expected(op: object, src: TensorType, dst: TensorType, blocks: dict[int, np.ndarray], world: int) -> dict:
    return NumpyTransport(InProcess(world)).communicate(op, src, dst, blocks)


@pytest.mark.parametrize("seed", range(4 * len(KINDS)))
def test_in_one_process(seed):
    world = 4 if seed % 2 == 0 else 2
    op, src, dst, blocks = case(seed, world)
    got = LaidOut(DeviceInProcess(world)).communicate(op, src, dst, {d: upload(x) for d, x in blocks.items()})
    want = expected(op, src, dst, blocks, world)
    assert mismatches({d: download(x) for d, x in got.items()}, want, dst, kind=src.partial_kind) == []


@pytest.mark.parametrize("number", range(PINNED))
def test_pinned_in_one_process(number):
    op, src, dst, blocks = pinned(number, 4)
    got = LaidOut(DeviceInProcess(4)).communicate(op, src, dst, {d: upload(x) for d, x in blocks.items()})
    want = expected(op, src, dst, blocks, 4)
    assert mismatches({d: download(x) for d, x in got.items()}, want, dst) == []


def test_pinned_cases_are_what_they_say():
    """Case 0's pieces need packing and case 1's do not; results have the declared strides."""
    (op, src, dst, blocks), (op1, _, _, blocks1) = pinned(0, 2), pinned(1, 2)
    x, x1 = upload(blocks[0]), upload(blocks1[0])
    assert x.strides == (6, 1) and not x.split(2, op.split_axis)[1].is_dense((0, 1))
    assert x1.strides == (4, 2, 1) and x1.split(2, op1.split_axis)[1].is_dense((1, 0, 2))
    want = expected(op, src, dst, blocks, 2)
    assert want[0].shape == (4, 3) and want[0].strides == (4, 16)
    assert want[0][:, 0].tolist() == [1003, 1009, 3, 9]  # mesh order [1, 0]: device 0 holds the second piece


@pytest.mark.parametrize("me, copies", [(0, 1), (1, 2), (3, 1)])
def test_the_peers_pieces_go_into_one_send_buffer_by_one_copy_a_run(me, copies, monkeypatch):
    from gpu_backend.kernels.elementwise import copy_into
    from gpu_backend.transports import packing

    block = np.arange(48, dtype=np.int32).reshape(4, 12)
    made = []
    monkeypatch.setattr(packing, "copy_into", lambda d, s: (made.append(d.shape), copy_into(d, s))[1])
    got = packing.peer_pieces(upload(block).split(4, 1), me, (0, 1))
    assert [download(g).tolist() for g in got] == [block[:, 3 * k:3 * k + 3].tolist() for k in range(4) if k != me]
    assert len(made) == copies and len({id(g.data) for g in got}) == 1
    assert all(g.is_dense((0, 1)) for g in got)


def test_a_reduce_scatter_chunk_is_every_slots_rows_side_by_side():
    from gpu_backend.transports.packing import slot_rows

    block = np.arange(36, dtype=np.int32).reshape(12, 3)
    send = slot_rows(upload(np.asfortranarray(block)), 0, 3, 4, 1, 3, (0, 1))
    assert send.shape == (3, 2, 3) and send.is_dense((0, 1, 2))
    assert download(send).tolist() == [block[4 * s + 1:4 * s + 3].tolist() for s in range(3)]


def test_under_mpi():
    done = run_mpi(4, ["-m", "mpi4py", "tests/test_gpu_collectives.py"], timeout=200, env={"PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert sum(line.startswith("ok ") for line in lines) == 4 * len(KINDS) + PINNED, done.stdout
    names = ["all_to_all"] * 3 + ["reduce_scatter"] * 2
    assert [line for line in lines if "chunks" in line] == [f"ok {4 * len(KINDS) + k} {names[k]} in 2 chunks"
                                                           for k in range(PINNED)], done.stdout


class SummingMpiWire(MpiWire):
    """MpiWire that also reduces integer sums itself, as NcclWire does (host
    staged, MPI's own reduce_scatter): the rank transport's native
    reduce_scatter paths under the simulator."""

    def native(self, kind: str, dtype: np.dtype) -> bool:
        return kind == "sum" and dtype.kind in "iu"

    def reduce_scatter(self, team: tuple[int, ...], send: object, recv: object, kind: str) -> None:
        self.start_reduce_scatter(team, send, recv, kind)

    def start_reduce_scatter(self, team: tuple[int, ...], send: object, recv: object, kind: str) -> None:
        from mpi4py import MPI

        host = send.flat().copy_to_host()
        got = np.empty(recv.size, host.dtype)
        wait(self.mpi.team_comm(team).Ireduce_scatter_block(host, got, op=MPI.SUM), "a reduce_scatter")
        if recv.size:
            recv.flat().copy_to_device(got)


def main(cases: int = 4 * len(KINDS)) -> int:
    """Under mpiexec: every rank builds every case, runs its own part, and checks
    what it received against the spec; rank 0 prints a line per case. The
    pinned cases go in two chunks (the line says how many exchanges or
    reductions rank 0 started)."""
    from gpu_backend.device import SIMULATED, use_device
    from gpu_backend.transports import rank_transport

    world = mpi_world()
    assert world is not None, "run me under mpiexec with 2 or 4 ranks"
    use_device(world.comm)
    failed, transport = 0, transport_for(world)
    plain = transport.wire
    summing = SummingMpiWire(transport.mpi) if SIMULATED else plain  # NCCL sums integers itself
    started = [0]

    def counted(fn: object) -> object:
        def call(*args: object) -> None:
            started[0] += 1
            fn(*args)
        return call

    for w in {id(plain): plain, id(summing): summing}.values():
        w.start_p2p, w.start_reduce_scatter = counted(w.start_p2p), counted(w.start_reduce_scatter)
    default_chunks = rank_transport.CHUNKS, rank_transport.RS_CHUNKS
    for seed in range(cases + PINNED):
        op, src, dst, blocks = case(seed, world.size) if seed < cases else pinned(seed - cases, world.size)
        rank_transport.CHUNKS, rank_transport.RS_CHUNKS = default_chunks if seed < cases else (2, 2)
        transport.wire = summing if seed >= cases and isinstance(op, ops.ReduceScatter) else plain
        started[0] = 0
        mine = {d: upload(x) for d, x in blocks.items() if d == world.rank}
        got = {d: download(x) for d, x in LaidOut(transport).communicate(op, src, dst, mine).items()}
        want = {d: x for d, x in expected(op, src, dst, blocks, world.size).items() if d == world.rank}
        native = transport.wire.native(getattr(op, "kind", ""), src.np_dtype)
        exact = not native or src.dtype not in ("f16", "f32", "f64")
        mine = mismatches(got, want, dst, exact, src.partial_kind)
        found = [p for part in world.comm.gather(mine, root=0) or [] for p in part]
        failed += bool(found)
        if world.is_root:
            chunks = f" in {started[0]} chunks" if seed >= cases else ""
            line = f"ok {seed} {ops.op_name(op)}{chunks}" if not found else f"FAIL {seed} {ops.op_name(op)}: {found}"
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
    rank_transport.CHUNKS, rank_transport.RS_CHUNKS = default_chunks
    transport.wire = plain
    transport.close()
    return 1 if failed else 0


if __name__ == "__main__":  # an argument: run only the first N random cases (and the pinned ones)
    sys.exit(main(*(int(a) for a in sys.argv[1:2])))
