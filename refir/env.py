"""refir's environment variables, parsed one way: a bad value is an InputError
naming the variable, never a ValueError from deep inside an import.

The command line checks every variable here before it does anything (`check_all`),
so that under MPI every rank finds the same bad value at once and rank 0 alone
says so in one line. The resource limits (REFIR_MAX_ELEMENTS and the like) live in refir/checks/limits.py.
"""

from __future__ import annotations

import math
import os

from refir.errors import InputError

# Switches: 0 off, 1 on, unset the default.
FLAGS = ("REFIR_MPI_ALONE", "REFIR_GPU_REPLAY", "REFIR_GPU_GRAPH", "REFIR_GPU_GRAPH_NCCL", "REFIR_GPU_POOL",
         "REFIR_SENTINEL")
FAULT_STAGES = ("inputs", "comm", "collective", "gather")
FAULT_KINDS = ("kill", "stall", "raise")


def flag(name: str, default: bool) -> bool:
    """A switch: `0` or `1` (unset or empty: `default`)."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if text not in ("0", "1"):
        raise InputError(f"{name}={text!r}: write {name}=0 (off) or {name}=1 (on)")
    return text == "1"


def seconds(name: str, default: float) -> float:
    """A positive, finite number of seconds (unset or empty: `default`)."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"{name}={text!r} is not a number of seconds (write e.g. {name}=120)")
    return value


def fault() -> tuple[int, str, str] | None:
    """REFIR_FAULT=RANK:STAGE:KIND (tests only; see refir.world.mpi_job.fault), or None."""
    text = os.environ.get("REFIR_FAULT", "").strip()
    if not text:
        return None
    parts = text.split(":")
    if len(parts) != 3 or not parts[0].isdigit() or parts[1] not in FAULT_STAGES or parts[2] not in FAULT_KINDS:
        raise InputError(f"REFIR_FAULT={text!r}: write RANK:STAGE:KIND, STAGE one of {', '.join(FAULT_STAGES)}, "
                         f"KIND one of {', '.join(FAULT_KINDS)}")
    return int(parts[0]), parts[1], parts[2]


def node_ranks() -> int | None:
    """REFIR_MPI_NODE_RANKS=K: every K consecutive world ranks form a simulated
    node (1: every rank its own); None where unset (the machine's own nodes)."""
    text = os.environ.get("REFIR_MPI_NODE_RANKS", "").strip()
    if not text:
        return None
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise InputError(f"REFIR_MPI_NODE_RANKS={text!r} is not a positive number of ranks "
                         "(write e.g. REFIR_MPI_NODE_RANKS=1: every rank its own node)")
    return int(text)


def check_all() -> None:
    """Every variable above, and the limits, parsed once: the first bad one raises."""
    from refir.checks.limits import LIMITS

    for name in FLAGS:
        flag(name, False)
    seconds("REFIR_MPI_TIMEOUT", 120)
    node_ranks()
    fault()
    for limit in LIMITS:
        _ = limit.value
