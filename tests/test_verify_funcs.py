"""The verifier on functions, symbols and equations (func_c*, op_c*), declared
results (result_c*) and a run's memory (memory_c1).

Each negative test is named after its label (docs/spec.md) and asserts the
VerifyError's label and where it points: `file:line:col` and the caret under
that column (verify_helpers.rejects). tests/test_verify.py checks that every
label the code raises has its test in one of these files."""

import numpy as np
import pytest
from verify_helpers import FILE, prog, rejects

import refir
from refir.errors import InputError, Loc, VerifyError
from refir.ir import ops
from refir.ir.program import Eqn, Func, Param, Program, Sym, Var
from refir.ir.types import Axis, Mesh, TensorType

# ---- functions -------------------------------------------------------------------------


def test_func_c1():
    rejects(prog("x: f32[4]", "y = relu(x)", "y = neg(x)", "return y"), "func_c1", 4, 3,
            "'y' is defined twice")
    rejects(prog("x: f32[4]", "b = relu(x)", "return b"), "func_c1", 3, 3, "'b' is reserved")
    rejects(prog("x: f32[N]", "N = relu(x)", "return N"), "func_c1", 3, 3, "'N' is already a symbol")
    rejects(prog("N: f32[N]", "return N"), "func_c1", 2, 11, "'N' is already a symbol")


def test_func_c2():
    rejects(prog("x: f32[4]", "y = add(x, z)", "z = relu(x)", "return y"), "func_c2", 3, 14,
            "'z' is not defined before this equation")


def test_func_c3():
    rejects(prog("x: f32[4]", "y: f32[Q] = relu(x)", "return y"), "func_c3", 3, 3,
            "symbol 'Q' is bound by no input")


def test_func_c3_symbol_operand_of_a_program_built_in_python():
    mesh = Mesh("m", (1,), (0,))
    t = TensorType("f32", (Axis(4),), mesh)
    eqn = Eqn("y", None, ops.Binary("add"), (Var("x"), Sym("Q", Loc(FILE, 3, 14))), Loc(FILE, 3, 3))
    func = Func("main", (Param("x", t),), (eqn,), ("y",))
    with pytest.raises(VerifyError) as info:
        refir.verify(Program((mesh,), (func,)))
    assert info.value.label == "func_c3"
    assert str(info.value.loc) == f"{FILE}:3:14"


def test_func_c4():
    rejects(prog("x: f32[4]", "y = relu(x)", "return y, w"), "func_c4", 4, 3, "result 'w' is not defined")
    rejects(prog("x: f32[4]", "y = relu(x)", "return y, y"), "func_c4", 4, 13, "'y' is returned twice")


def test_func_c5():
    text = "mesh m = [0]\nfunc f(x: f32[4]) {\n  return x\n}\nfunc f(x: f32[4]) {\n  return x\n}\n"
    rejects(text, "func_c5", 2, 1, "function 'f' is defined twice")


def test_op_c1():
    rejects(prog("x: f32[4]", "y = transpose(x)", "return y"), "op_c1", 3, 7, "unknown op 'transpose'")


def test_op_c2():
    rejects(prog("x: f32[4]", "y = add(x)", "return y"), "op_c2", 3, 7, "add takes 2 operands")
    rejects(prog("x: f32[4]", "y = sum(x)", "return y"), "op_c2", 3, 7, "sum needs dims=[...]")
    rejects(prog("x: f32[4]", "y = relu(x, dims=[0])", "return y"), "op_c2", 3, 7,
            "relu takes no argument 'dims'")
    rejects(prog("x: f32[4, 2]", "y = permute(x)", "return y"), "op_c2", 3, 7, "permute takes an operand")
    rejects(prog("x: f32[4, 2]", "y = matmul(x, 2)", "return y"), "op_c2", 3, 3,
            "matmul takes two tensor operands")
    rejects(prog("x: f32[4]", "y = sum(3, dims=[0])", "return y"), "op_c2", 3, 3, "sum needs a tensor operand")

def test_result_c1():
    rejects(prog("x: f32[4, 2]", "y: f64[4, 2] = relu(x)", "return y"), "result_c1", 3, 3,
            "declared dtype f64, but the op gives f32")
    rejects(prog("x: f32[4, 2]", "y: f32[2, 4] = permute(x, [0, 1])", "return y"), "result_c1", 3, 3,
            "declared extents [2, 4], but the op gives [4, 2]")
    rejects(prog("x: f32[4, 2]", "y: f32[4] = sum(x, dims=[0])", "return y"), "result_c1", 3, 3,
            "declared extents [4], but the op gives [2]")


def test_result_c2():
    rejects(prog("x: f32[4, 2]", "y: f32[2@DIDx, 4] = permute(x, [1, 0])", "return y"), "result_c2", 3, 3,
            "a resharding needs an explicit set")
    text = "mesh m = [0, 1]\nmesh q = [2]\nfunc main(x: f32[4] on m) {\n" \
           "  y: f16[4] on q = cast(x, dtype=f16)\n  return y\n}\n"
    rejects(text, "result_c2", 4, 3)


def test_memory_c1(monkeypatch):
    """A run's memory is summed over every device (tests/test_memory_limit.py has the rest):
    64 bytes replicated on four devices is 256, over a limit of 200."""

    import refir

    text = "mesh m = [0, 1, 2, 3]\nfunc main(x: f32[16@DIDx] on m) {\n  y: f32[16] on m = set(x)\n  return y\n}\n"
    monkeypatch.setenv("REFIR_MAX_RUN_BYTES", "200")
    with pytest.raises(InputError, match=r"memory_c1"):
        refir.run(refir.load(text), {"x": np.arange(16, dtype=np.float32)}, backend="spmd", world=4)
    monkeypatch.setenv("REFIR_MAX_RUN_BYTES", str(1 << 20))
    assert refir.run(refir.load(text), {"x": np.arange(16, dtype=np.float32)}, backend="spmd",
                     world=4).outputs["y"].tolist() == list(range(16))
