"""Several neighbouring elements of an array in one load (8 or 16 bytes).

numba has no vector element types, so `loader(lanes)` is a device function
`load(x, i)` that returns x[i], x[i + 1], ..., x[i + lanes - 1] as a tuple of
four. On a GPU it is one LLVM load of a `<lanes x T>` vector aligned to its
whole size (one `ld.v2` / `ld.v4` instruction); the caller guarantees that
element i's address is a multiple of lanes * itemsize. Under the simulator it
is `lanes` plain element reads, with the same indexing. A load of two lanes
fills the tuple's last two places with its two values again (a caller that
folds four lanes and stores two leaves the copies to dead-code elimination):
one tuple type for both widths keeps the callers free of typed branches.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from gpu_backend.device import SIMULATED, cuda

LANES = (2, 4)  # the widths `loader` makes


@cache
def loader(lanes: int) -> Callable:
    assert lanes in LANES, "two or four lanes"
    return _simulated(lanes) if SIMULATED else _device(lanes)


def _simulated(lanes: int) -> Callable:
    if lanes == 4:
        @cuda.jit(device=True)
        def load4(x: Any, i: int) -> tuple[Any, Any, Any, Any]:
            return x[i], x[i + 1], x[i + 2], x[i + 3]

        return load4

    @cuda.jit(device=True)
    def load2(x: Any, i: int) -> tuple[Any, Any, Any, Any]:
        a, b = x[i], x[i + 1]
        return a, b, a, b

    return load2


def _device(lanes: int) -> Callable:
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    @intrinsic
    def load(typingctx: Any, array: Any, index: Any) -> Any:
        if not isinstance(array, types.Array) or array.ndim != 1 or not isinstance(index, types.Integer):
            return None
        result = types.UniTuple(array.dtype, 4)

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            array_type, index_type = sig.args
            ary = context.make_array(array_type)(context, builder, value=args[0])
            i = context.cast(builder, args[1], index_type, types.intp)
            ptr = cgutils.get_item_pointer(context, builder, array_type, ary, [i])
            element = context.get_value_type(array_type.dtype)
            vector_type = ir.VectorType(element, lanes)
            size = lanes * context.get_abi_sizeof(element)
            vector = builder.load(builder.bitcast(ptr, vector_type.as_pointer()), align=size)
            lane = [builder.extract_element(vector, ir.Constant(ir.IntType(32), k)) for k in range(lanes)]
            return context.make_tuple(builder, result, lane * (4 // lanes))

        return result(array, index), codegen

    return load
