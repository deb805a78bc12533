"""Resource limits: refused up front, before anything is allocated.

A few bytes of program text, `--bind` or `.npz` header can ask for terabytes. Every
such request is checked against a limit first (docs/spec.md, "Limits"); each limit
can be raised through its environment variable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from math import prod

from refir.errors import InputError


@dataclass(frozen=True)
class Limit:
    env: str
    default: int
    what: str
    label: str = ""  # the constraint of docs/spec.md §12.2 a refusal cites

    @property
    def value(self) -> int:
        text = os.environ.get(self.env, "")
        if not text:
            return self.default
        if not text.isascii() or not text.isdigit():
            raise InputError(f"{self.env}={text!r} is not a non-negative integer")
        return int(text)

    def check(self, amount: int, subject: str) -> None:
        """An InputError when `amount` exceeds the limit; `subject` ("x: f32[N] has")
        says what asked for it."""
        if amount > self.value:
            raise InputError(f"{subject} {amount} {self.what}, over refir's limit of {self.value} "
                             f"(raise it with {self.env}=N)" + (f" [{self.label}]" if self.label else ""))


ELEMENTS = Limit("REFIR_MAX_ELEMENTS", 1 << 27, "elements")  # per tensor: 1 GiB of f64
# Device ids 0 .. limit-1 and every world, for every command (docs/spec.md §12.2, devices_c1):
# check, lower and explain are linear in the devices; a run is bounded by its memory
# (RUN_BYTES), the count only because a world's every device is hosted (devices_c3).
DEVICES_C1 = "devices_c1"
DEVICES = Limit("REFIR_MAX_DEVICES", 65536, "devices", DEVICES_C1)
PROGRAM_BYTES = Limit("REFIR_MAX_PROGRAM_BYTES", 64 << 20, "bytes")  # one .rir file
INPUT_BYTES = Limit("REFIR_MAX_INPUT_BYTES", 8 << 30, "bytes")  # a whole .npz, uncompressed
# Every device's buffers together, replicas counted per device (refir/checks/footprint.py).
RUN_BYTES = Limit("REFIR_MAX_RUN_BYTES", 8 << 30, "bytes")
MEMORY_C1 = "memory_c1"  # docs/spec.md §12.3: a run's footprint is within RUN_BYTES before anything is allocated

LIMITS = (ELEMENTS, DEVICES, PROGRAM_BYTES, INPUT_BYTES)


MAX_DIGITS = 19  # extents, device ids, dims and layouts fit in 64 bits


def check_static(extents: list[int | str], subject: str) -> None:
    """A type's static extents as the parser reads them: each of at most MAX_DIGITS
    digits, their product within ELEMENTS (`subject`: where the type stands)."""
    static = [e for e in extents if isinstance(e, int)]
    for e in static:
        if len(str(abs(e))) > MAX_DIGITS:
            raise InputError(f"{subject}: the extent {str(e)[:24]}... has {len(str(abs(e)))} digits; extents fit "
                             "in 64 bits")
    ELEMENTS.check(prod(static), f"{subject}: a tensor of static extents {static} has")


def check_shape(shape: tuple[int, ...], subject: str) -> None:
    ELEMENTS.check(prod(shape), f"{subject} of shape {shape} has")
