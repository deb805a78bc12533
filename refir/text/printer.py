"""Programs back to text. `parse(print_program(p)) == p` for every program."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields

from refir.ir import ops
from refir.ir.program import Eqn, Func, Program
from refir.ir.types import Mesh, TensorType


def format_mesh(mesh: Mesh) -> str:
    def nest(flat: list[int], shape: tuple[int, ...]) -> str:
        if len(shape) == 1:
            return "[" + ", ".join(map(str, flat)) + "]"
        step = len(flat) // shape[0]
        return "[" + ", ".join(nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])) + "]"

    return f"mesh {mesh.name} = {nest(list(mesh.devices), mesh.shape)}"


def format_call(op: object, args: tuple) -> str:
    """`name(args, key=value)` as the text format writes the op."""
    parts = [str(a) for a in args]
    match op:
        case ops.Cast(dtype=dt):
            parts.append(f"dtype={dt}")
        case ops.Permute(perm=perm):
            parts.append(_ints(perm))
        case ops.Iota(axis=axis):
            parts.append(f"axis={axis}")
        case ops.Reshape(shape=shape):  # its Sym operands are the shape's symbols, written there
            parts = [parts[0], "[" + ", ".join(map(str, shape)) + "]"]
        case ops.Unsqueeze(dims=dims) | ops.Reduction(dims=dims):
            parts.append(f"dims={_ints(dims)}")
        case ops.Slice(axes=axes, starts=starts, stops=stops, steps=steps):
            parts += [f"starts={_ints(starts)}", f"stops={_ints(stops)}"]
            # steps all 1 and the leading axes are what the syntax gives when left out
            parts += [f"steps={_ints(steps)}"] if steps != (1,) * len(starts) else []
            parts += [f"axes={_ints(axes)}"] if axes != tuple(range(len(starts))) else []
        case ops.Select(axis=axis, index=index):
            parts += [f"axis={axis}", f"index={index}"]
        case ops.Pad(low=low, high=high, value=value):
            parts += [f"low={_ints(low)}", f"high={_ints(high)}"]
            parts += [f"value={value!r}"] if (type(value), value) != (int, 0) else []  # -0.0 and 0.0 are printed
        case ops.Cat(axis=axis):
            parts.append(f"axis={axis}")
        case _ if ops.is_communication(op) or isinstance(op, ops.Partition):
            for f in fields(op):  # type: ignore[arg-type]
                value = getattr(op, f.name)
                parts.append(f"{f.name}={'[' + ', '.join(value) + ']' if isinstance(value, tuple) else value}")
    return f"{ops.op_name(op)}({', '.join(parts)})"


def format_eqn(eqn: Eqn, inferred: TensorType | None = None) -> str:
    t = eqn.type or inferred
    head = f"{eqn.out}: {t}" if t else eqn.out
    return f"{head} = {format_call(eqn.op, eqn.args)}"


def format_func(func: Func, types: Mapping[str, TensorType] | None = None) -> str:
    """The function; with `types`, every equation shows its (inferred) type."""
    params = ", ".join(f"{p.name}: {p.type}" for p in func.params)
    lines = [f"func {func.name}({params}) {{"]
    lines += [f"  {format_eqn(e, types.get(e.out) if types else None)}" for e in func.eqns]
    lines += [f"  return {', '.join(func.results)}", "}"]
    return "\n".join(lines)


def print_program(program: Program) -> str:
    parts = [format_mesh(m) for m in program.meshes]
    text = "\n".join(parts) + "\n\n" + "\n\n".join(format_func(f) for f in program.funcs) + "\n"
    for e in program.expects:
        text += f"# expect: {e.name} = {e.expr}\n"
    return text


def _ints(xs: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, xs)) + "]"
