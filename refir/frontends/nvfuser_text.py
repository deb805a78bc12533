"""How the nvFuser importer writes refir text: extents over refir's names, a
sharding's `@DIDx`, a mesh's nested device list."""

from __future__ import annotations

from collections.abc import Callable

from refir.errors import InputError
from refir.ir.extents import Extent, ExtentExpr, NotAnExtent, extent_expr


def quotient_text(e: Extent, name: Callable[[str], str]) -> str:
    """An extent expression over nvFuser's symbols written over refir's (`name` of
    each: a symbol, or a number where the dump fixes it), in canonical form."""
    if not isinstance(e, ExtentExpr):
        return str(e)
    coef, syms = e.coef, []
    for s in e.syms:
        n = name(s)
        coef, syms = (coef * int(n), syms) if n.isdigit() else (coef, [*syms, n])
    den = name(e.den) if isinstance(e.den, str) else e.den
    try:
        return str(extent_expr(coef, syms, int(den) if isinstance(den, str) and den.isdigit() else den))
    except NotAnExtent as err:  # a divisor the dump fixes to 0, or one that does not divide a fixed product
        raise InputError(f"the extent {e} is no extent where the dump fixes its symbols: {err}") from None


def sharding_text(shard: str | tuple[str, ...] | None) -> str:
    """`@DIDx`, a nest's `@(DIDy,DIDx)`, or nothing."""
    if not shard:
        return ""
    return f"@{shard}" if isinstance(shard, str) else f"@({','.join(shard)})"


def mesh_text(flat: list[int], shape: tuple[int, ...]) -> str:
    """A mesh's device ids, listed flat in row-major order, nested as its shape says."""
    if len(shape) == 1:
        return "[" + ", ".join(map(str, flat)) + "]"
    step = len(flat) // shape[0]
    return "[" + ", ".join(mesh_text(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])) + "]"
