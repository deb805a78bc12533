"""NcclWire's calls, checked without a GPU: the CUDA driver and nccl4py's
bindings are stand-ins that record what they are asked, so that the pointers,
counts, types, streams and the order of the calls are what NCCL must get
(the device session runs the same code on two GPUs)."""

from types import SimpleNamespace

import numpy as np
import pytest

from gpu_backend.buffers.buffer import DeviceBuffer
from gpu_backend.transports import pending, wires
from gpu_backend.transports.wires import NcclWire

SUCCESS = "success"


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple] = []


class Driver(Recorder):
    """cuda.bindings.driver, as far as NcclWire uses it: every call succeeds."""

    CUresult = SimpleNamespace(CUDA_SUCCESS=SUCCESS)
    CUstream_flags = SimpleNamespace(CU_STREAM_NON_BLOCKING=1)
    CUevent_flags = SimpleNamespace(CU_EVENT_DISABLE_TIMING=2)

    def __init__(self) -> None:
        super().__init__()
        self.events = 0

    @staticmethod
    def CUstream(handle: int) -> int:  # noqa: N802 (the driver's name)
        return handle

    def cuCtxGetCurrent(self) -> tuple:  # noqa: N802
        return SUCCESS, 5

    def cuCtxGetStreamPriorityRange(self) -> tuple:  # noqa: N802
        return SUCCESS, 0, -5

    def cuStreamCreateWithPriority(self, flags: int, priority: int) -> tuple:  # noqa: N802
        self.calls.append(("stream", flags, priority))
        return SUCCESS, 77

    def cuEventCreate(self, flags: int) -> tuple:  # noqa: N802
        self.events += 1
        return SUCCESS, f"event{self.events}"

    def cuEventRecord(self, event: str, stream: int) -> tuple:  # noqa: N802
        self.calls.append(("record", event, stream))
        return (SUCCESS,)

    def cuStreamWaitEvent(self, stream: int, event: str, flags: int) -> tuple:  # noqa: N802
        self.calls.append(("wait", stream, event))
        return (SUCCESS,)


class Raw(Recorder):
    """nccl4py's bindings: each call recorded with its arguments."""

    @staticmethod
    def Comm(handle: int) -> tuple:  # noqa: N802
        return ("comm", handle)

    def __getattr__(self, name: str):
        return lambda *args: self.calls.append((name, *args))


class Array:
    """A device array as far as a wire reads it: its dtype and its address."""

    def __init__(self, address: int, dtype: str) -> None:
        self.dtype = np.dtype(dtype)
        self.__cuda_array_interface__ = {"data": (address, False)}


@pytest.fixture(autouse=True)
def no_streams_yet(monkeypatch):
    monkeypatch.setattr(wires, "_STREAMS", {})
    monkeypatch.setattr(pending, "_pending", None)


def wire() -> tuple[NcclWire, Driver, Raw]:
    w = NcclWire.__new__(NcclWire)
    types = {"float32": 7, "int64": 4}
    w.nccl = SimpleNamespace(SUM=0, PROD=1, MAX=2, MIN=3, UINT8=1, NcclDataType=SimpleNamespace(
        from_numpy_dtype=lambda d: types[np.dtype(d).name]))
    w.driver, w.raw = Driver(), Raw()
    w.stream = w.ready = w.done = None
    w.world = SimpleNamespace(ptr=900)
    w.team = lambda devices: SimpleNamespace(ptr=100 + len(devices))
    return w, w.driver, w.raw


def test_an_allreduce_waits_for_the_kernels_runs_on_its_stream_and_the_kernels_wait_for_it():
    w, driver, raw = wire()
    x = DeviceBuffer(Array(4096, "float32"), 3, (2, 5), (5, 1))  # from element 3 on
    out = DeviceBuffer.dense(Array(8192, "float32"), (2, 5))
    w.allreduce((0, 1), x, out, "sum")
    assert driver.calls == [("stream", 1, -5), ("record", "event1", 0), ("wait", 77, "event1"),
                            ("record", "event2", 77), ("wait", 0, "event2")]
    assert pending.unsettled() == "an NCCL allreduce"  # the host waits at its next copy, not here
    assert raw.calls == [("all_reduce", 4096 + 3 * 4, 8192, 10, 7, 0, ("comm", 102), 77)]


def test_byte_collectives_move_bytes_and_alltoall_counts_per_peer():
    w, driver, raw = wire()
    send = DeviceBuffer.dense(Array(1000, "int64"), (3, 4))
    recv = DeviceBuffer.dense(Array(5000, "int64"), (12, 4))
    w.allgather((0, 1, 2, 3), send, recv)
    w.alltoall((0, 1), recv, recv)
    w.reduce_scatter((0, 1), recv, send.take(0, 0, 2), "max")
    w.broadcast((2, 0), send, 1)
    assert raw.calls == [("all_gather", 1000, 5000, 96, 1, ("comm", 104), 77),
                         ("allto_all", 5000, 5000, 192, 1, ("comm", 102), 77),
                         ("reduce_scatter", 5000, 1000, 8, 4, 2, ("comm", 102), 77),
                         ("broadcast", 1000, 1000, 96, 1, 1, ("comm", 102), 77)]
    assert [c[0] for c in driver.calls].count("record") == 8  # ready and done, each call


def test_point_to_point_is_one_group_on_the_world_and_empty_buffers_stay_home():
    w, driver, raw = wire()
    a = DeviceBuffer.dense(Array(64, "float32"), (4,))
    empty = DeviceBuffer.dense(Array(0, "float32"), (0,))
    w.start_p2p([(1, a), (2, empty)], [(3, a.take(0, 2, 4))])
    assert driver.calls[-1] == ("wait", 77, "event1")  # queued, not waited for
    w.finish("an exchange")
    assert raw.calls == [("group_start",), ("send", 64, 16, 1, 1, ("comm", 900), 77),
                         ("recv", 64 + 8, 8, 1, 3, ("comm", 900), 77), ("group_end",)]
    assert driver.calls[-2:] == [("record", "event2", 77), ("wait", 0, "event2")]
    assert pending.unsettled() == "an exchange"


def test_every_wire_of_the_process_shares_one_stream_and_its_events():
    (first, driver, _), (second, other, _) = wire(), wire()
    a = DeviceBuffer.dense(Array(64, "float32"), (4,))
    first.p2p([(1, a)], [])
    second.p2p([(1, a)], [])
    assert [c for c in driver.calls if c[0] == "stream"] == [("stream", 1, -5)]
    assert [c for c in other.calls if c[0] == "stream"] == []  # the second found the first's
    assert other.calls[:2] == [("record", "event1", 0), ("wait", 77, "event1")]


def test_buffers_on_raw_pool_memory_go_by_their_addresses():
    from gpu_backend.buffers.memory import Memory

    w, _, raw = wire()
    f32 = np.dtype(np.float32)
    a, b = DeviceBuffer.dense(Memory(1000, 8, f32, None), (2, 4)), DeviceBuffer.dense(Memory(2000, 8, f32, None), (8,))
    w.allgather((0, 1), a.take(0, 1, 2), b)  # the second row: 16 bytes in
    assert raw.calls == [("all_gather", 1016, 2000, 16, 1, ("comm", 102), 77)]


def test_started_reduce_scatters_leave_the_kernels_free_until_finish():
    w, driver, raw = wire()
    send = DeviceBuffer.dense(Array(1000, "int64"), (2, 2, 4))
    got = DeviceBuffer.dense(Array(5000, "int64"), (4, 4))
    w.start_reduce_scatter((0, 1), send, got.take(0, 0, 2), "sum")
    w.start_reduce_scatter((0, 1), send, got.take(0, 2, 4), "sum")
    assert ("wait", 0, "event2") not in driver.calls  # the kernels' stream waits for neither yet
    assert pending.unsettled() is None
    w.finish("a reduce_scatter")
    assert raw.calls == [("reduce_scatter", 1000, 5000, 8, 4, 0, ("comm", 102), 77),
                         ("reduce_scatter", 1000, 5000 + 64, 8, 4, 0, ("comm", 102), 77)]
    assert driver.calls[-2:] == [("record", "event2", 77), ("wait", 0, "event2")]
    assert pending.unsettled() == "a reduce_scatter"


def test_a_recorded_run_notes_each_nccl_call_to_make_again_on_its_communicator(monkeypatch):
    """Under a recording (gpu_backend/launches/replay.py), the wire's calls are noted as
    collectives; made again, they ask NCCL the very same; and a replay first
    requires the team's communicator to be the one the calls used."""
    from gpu_backend.launches import recording
    from refir.world.mpi_job import COMMS

    w, driver, raw = wire()
    owner = SimpleNamespace(ptr=102)
    w.team = lambda devices: owner
    w.mpi = SimpleNamespace(comm=SimpleNamespace(size=2))
    a = DeviceBuffer.dense(Array(64, "float32"), (4,))
    total = DeviceBuffer.dense(Array(256, "float32"), (4,))
    record = recording.active = recording.Recording()
    try:
        w.allreduce((0, 1), a, total, "sum")
        w.p2p([(1, a)], [])
    finally:
        recording.active = None
    assert record.collectives == 4 and [c[0] for c in record.calls] == ["collective"] * 4
    asked, recorded = list(raw.calls), [c for c in driver.calls if c[0] != "stream"]  # the stream: made once
    raw.calls.clear()
    driver.calls.clear()
    pending._pending = None
    for _, fn, args in record.calls:
        fn(*args)
    assert raw.calls == asked and driver.calls == recorded
    assert pending.unsettled() == "an NCCL allreduce"
    checks = record.requires
    assert set(checks) == {("nccl", (0, 1)), ("nccl", "world")}
    monkeypatch.setattr(COMMS, "others", {("nccl", (0, 1)): (owner, None)})
    assert checks[("nccl", (0, 1))]() and not checks[("nccl", "world")]()  # the world's is not made here
    monkeypatch.setattr(COMMS, "others", {("nccl", (0, 1)): (SimpleNamespace(ptr=102), None),
                                          ("nccl", (0, 1)) * 0: None})
    assert not checks[("nccl", (0, 1))]()  # made anew (refir.close(), then a run): not the one recorded
