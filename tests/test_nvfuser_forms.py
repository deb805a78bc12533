"""Forms of real nvFuser printouts the importer reads (refir/frontends/nvfuser_forms.py,
nvfuser_axes.py, nvfuser_ops.py): a linear of a 3-D input, an output axis printed as
its loop split with static extents, stream-parallel axes, a log that prints the
program once per device. Each printout is imported and run on spmd (and global and
gpu) against a numpy reference."""

from pathlib import Path

import numpy as np
import pytest

import refir
from refir.cli import main
from refir.errors import ParseError
from refir.frontends.nvfuser import import_nvfuser
from refir.lowering.lower import lower
from refir.running.inputs import default_bindings, draw_inputs

DATA = Path(__file__).parent / "data"
RS = (DATA / "nvfuser_reduce_scatter_then_allgather.txt").read_text()
# The same printout without its transforms: T2's result axis shows only as its loop split.
RS_BARE = RS[:RS.index("T2_g_float[rdeviceIdx.x9{2}, iS5{4}, ideviceIdx.x7{2}, iS8{3}] (DeviceMesh{0 1})\n logical")]


def run_all(program: refir.Program, bindings: dict | None = None, seed: int = 2) -> tuple[dict, dict]:
    """Inputs and the spmd outputs; global and gpu must give the same bits."""
    checked = refir.verify(program)
    xs = draw_inputs(checked, {**default_bindings(checked), **(bindings or {})}, seed)
    got = refir.run(program, xs, backend="spmd").outputs
    for backend in ("global", "gpu"):
        other = refir.run(program, xs, backend=backend).outputs
        for k, v in got.items():
            np.testing.assert_array_equal(other[k], v, err_msg=f"{k} on {backend}")
    return xs, got


def test_linear_of_a_3d_input_with_bias_and_a_matmul_of_different_ranks():
    imported = import_nvfuser((DATA / "nvfuser_linear_3d_bias.txt").read_text(), "lin.txt")
    types = {e.out: str(e.type) for e in imported.program.funcs[0].eqns}
    assert types["T3"] == "f32[2, 3, i3@DIDx] on m" and types["T4"] == "f32[2, 3, 5] on m"
    assert "T2_b: f32[b, b, i3@DIDx] on m = unsqueeze(T2, dims=[0, 1])" in imported.text
    xs, got = run_all(imported.program, {"i3": 7})  # 7 over 3 devices: blocks of 3, 3, 1
    want = (xs["T0"] @ xs["T1"].T + xs["T2"]) @ xs["T9"]
    np.testing.assert_allclose(got["T4"], want, rtol=1e-5)


def test_an_output_axis_printed_as_its_loop_split_is_the_sharded_axis():
    imported = import_nvfuser(RS_BARE, "rs.txt")
    func = imported.program.funcs[0]
    assert [str(e.type) for e in func.eqns] == [
        "f32[2@DIDx, 4, 6] on m", "f32[2@DIDx, 4, 6] on m", "f32[4, 6@DIDx] on m", "f32[4, 6] on m"]
    assert any("read as one split axis" in n for n in imported.notes)
    kinds = [type(s.op).__name__ for s in lower(refir.verify(imported.program)).steps if s.is_communication]
    assert kinds == ["ReduceScatter", "Allgather"]
    xs, got = run_all(imported.program)
    np.testing.assert_array_equal(got["T3"], np.maximum(2 * xs["T0"], 0).sum(0))
    # with the transforms printed, the same program
    assert refir.print_program(import_nvfuser(RS, "rs.txt").program) == refir.print_program(imported.program)


def test_stream_parallel_axes_and_a_3d_row_parallel_linear_in_host_ir():
    imported = import_nvfuser((DATA / "nvfuser_stream_row_parallel_3d.txt").read_text(), "host.txt")
    func = imported.program.funcs[0]
    assert [(p.name, str(p.type)) for p in func.params] == [
        ("T0", "f32[2, i1, 8@DIDx] on m"), ("T1", "f32[5, 8@DIDx] on m")]
    assert func.results == ("T2",)
    assert any("istreamIdx" in n and "not what it computes" in n for n in imported.notes)
    assert any("read as T2 = T5" in n for n in imported.notes)
    assert not any("refir lowers it to" in n for n in imported.notes)  # refir's allreduce is nvFuser's
    xs, got = run_all(imported.program, {"i1": 6})
    np.testing.assert_allclose(got["T2"], xs["T0"] @ xs["T1"].T, rtol=1e-5)


def per_device(text: str, n: int) -> str:
    return "".join(f"[rank {k}] fusion before segmentation:\n{text}\n" for k in range(n))


def test_a_log_that_prints_the_program_once_per_device_is_imported_once():
    once = import_nvfuser(RS, "rs.txt")
    imported = import_nvfuser(per_device(RS, 2), "log.txt")
    assert refir.print_program(imported.program) == refir.print_program(once.program)
    assert any("prints the same program 2 times" in n and "imported once" in n for n in imported.notes)
    xs, got = run_all(imported.program)
    np.testing.assert_array_equal(got["T3"], np.maximum(2 * xs["T0"], 0).sum(0))


def test_copies_that_differ_are_refused_in_one_line(capsys, tmp_path):
    log = per_device(RS, 2)
    second = log.index("[rank 1]")
    log = log[:second] + log[second:].replace("op = add", "op = max", 1)
    with pytest.raises(ParseError) as e:
        import_nvfuser(log, "log.txt")
    assert "the log prints the program 2 times" in e.value.message and "copy 2 differs" in e.value.message
    assert e.value.loc.line == log[:log.index("op = max")].count("\n")
    path = tmp_path / "log.txt"
    path.write_text(log)
    assert main(["import-nvfuser", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("parse error: the log prints the program 2 times")
    assert "Traceback" not in err


def test_expand_of_a_broadcast_axis():
    imported = import_nvfuser((DATA / "nvfuser_expand.txt").read_text(), "ex.txt")
    assert "T2: f32[i0, 8] on m = expand(T0, i0, 8)" in imported.text
    xs, got = run_all(imported.program, {"i0": 6})
    np.testing.assert_array_equal(got["T3"], xs["T0"] + xs["T1"])
    # an expand that grows nothing (its axis printed bS4{1}) is the values as they are
    same = import_nvfuser((DATA / "nvfuser_expand.txt").read_text().replace("bS4{1 ex i0}", "bS4{1}"), "ex.txt")
    assert "T2: f32[b, 8] on m = set(T0)" in same.text
    xs, got = run_all(same.program, {"i0": 6})
    np.testing.assert_array_equal(got["T3"], xs["T0"] + xs["T1"])


# test_resize.cpp's RoPE fusion (NVIDIA/Fuser, the pattern of its printed comment; its `*` restored):
# an expand to {1, 4, 1, 16} grows axis 1 only and leaves axes 0 and 2 broadcast
PARTIAL_EXPAND = """Inputs:
  T13_g_float[bS35{1}, iS36{16}]
  T64_g_float[bS215{1}, iS216{4}, bS217{1}, iS218{16}]
Outputs:
  T89_g_float[bS319{1}, iS320{4}, bS321{1}, iS322{16}]
%kernel_math {
T106_l_float[bS399{1}, bS400{1}, bS401{1}, iS402{16}]
   = broadcast( T13_g_float[bS35{1}, iS36{16}], flags = {true, true, false, false} )
T77_g_float[bS267{1}, bS268{1 ex 4}, bS269{1}, iS270{16}] = expand( T106_l_float[bS399{1}, bS400{1}, bS401{1},
iS402{16}], {1, 4, 1, 16} )
T89_g_float[bS319{1}, iS320{4}, bS321{1}, iS322{16}]
   = T64_g_float[bS215{1}, iS216{4}, bS217{1}, iS218{16}]
   * T77_g_float[bS267{1}, bS268{1 ex 4}, bS269{1}, iS270{16}];
} // %kernel_math
"""


def test_an_expand_that_leaves_some_broadcast_axes_keeps_them_broadcast():
    imported = import_nvfuser(PARTIAL_EXPAND, "rope.txt")
    text = imported.text
    assert "T77_squeezed: f32[b, 16] on m = max(T106, dims=[0, 2])" in text, text
    assert "T77_grown: f32[4, 16] on m = expand(T77_squeezed, 4, 16)" in text, text
    assert "T77: f32[b, 4, b, 16] on m = unsqueeze(T77_grown, dims=[0, 2])" in text, text
    assert any("expand leaves axes [0, 2] of T106 broadcast" in n for n in imported.notes)
    xs, got = run_all(imported.program)
    assert got["T89"].shape == (1, 4, 1, 16)
    np.testing.assert_array_equal(got["T89"], xs["T64"] * xs["T13"].reshape(1, 1, 1, 16))


def test_communication_input_printed_only_in_the_communication():
    # a host-IR paste whose Communication reads a value whose producer was left out
    text = ("Communication 3 (type=Broadcast, team=(1 0), root=0, Input=T5_l[ iS5{6} ] (DeviceMesh{0}), "
            "Output=T6_l[ iS6{6} ] (DeviceMesh{1}))\n"
            "T7_g[ iS7{6} ] (DeviceMesh{1})\n   = T6_g[ iS6{6} ] (DeviceMesh{1})\n"
            "   + T6_g[ iS6{6} ] (DeviceMesh{1});\n")
    from refir.frontends.nvfuser import import_nvfuser
    imp = import_nvfuser(text)
    assert "func main(T5: f32[6] on m0)" in imp.text
    assert "T6: f32[6] on m1 = set(T5)" in imp.text and "T7: f32[6] on m1 = add(T6, T6)" in imp.text


def test_cuda_float_spelling_of_a_unary_op():
    # printMath writes the float overload of a math function: sqrtf, expf, fabsf
    from refir.frontends.nvfuser import import_nvfuser
    imp = import_nvfuser("T1_l_float[ iS1{4} ]\n   = sqrtf(T0_g_float[ iS0{4} ]);\n"
                         "T2_g_float[ iS2{4} ]\n   = expf(T1_l_float[ iS1{4} ]);\n")
    assert "T1: f32[4] on m = sqrt(T0)" in imp.text and "T2: f32[4] on m = exp(T1)" in imp.text


def test_prefix_minus_is_neg():
    # printMath prints a neg as a prefix minus
    from refir.frontends.nvfuser import import_nvfuser
    imp = import_nvfuser("T1_g_float[ iS1{4} ]\n   = -T0_g_float[ iS0{4} ];\n")
    assert "T1: f32[4] on m = neg(T0)" in imp.text


def test_reciprocal_is_a_div_of_one():
    # nvFuser prints 1/x as reciprocal(T0); refir writes it as div of the literal one, in x's dtype
    imp = import_nvfuser("T1_g_float[ iS1{5} ]\n   = reciprocal(T0_g_float[ iS0{5} ]);\n")
    assert "T1: f32[5] on m = div(1.0, T0)" in imp.text
    xs, got = run_all(imp.program)
    assert got["T1"].dtype == np.float32
    np.testing.assert_array_equal(got["T1"], np.float32(1) / xs["T0"])
    with pytest.raises(ParseError, match="takes one TensorView operand"):
        import_nvfuser("T1_g_float[ iS1{5} ]\n   = reciprocal(2.0);\n")


def test_loop_positions_after_an_operand_change_nothing():
    # a scheduled printout writes ca_pos( n ) / produce_pos( n ) after a TensorView, operands included
    plain = "T1_g_float[ iS1{7} ]\n   = pad( T0_g_float[ iS0{5} ], {1, 1} );\n"
    placed = ("T1_g_float[ iS1{7} ] produce_pos( 1 )\n"
              "   = pad( T0_g_float[ iS0{5} ] ca_pos( 1 ) produce_pos( 1 ), {1, 1} );\n")
    imp = import_nvfuser(placed)
    assert refir.print_program(imp.program) == refir.print_program(import_nvfuser(plain).program)
    xs, got = run_all(imp.program)
    np.testing.assert_array_equal(got["T1"], np.pad(xs["T0"], 1))
    with pytest.raises(ParseError, match="expected the loop position of ca_pos"):
        import_nvfuser(placed.replace("ca_pos( 1 )", "ca_pos( x )"))


def test_broadcast_of_an_operand_with_broadcast_axes_of_its_own():
    # the flags name the new axes; the operand's own b axis stays where it was (a real printout's form)
    text = ("T1_g_float[ bS2{1}, bS3{1}, iS4{6} ]\n"
            "   = broadcast( T0_g_float[ bS0{1}, iS1{6} ], flags = {true, false, false} );\n"
            "T3_g_float[ iS7{4}, bS8{1}, iS9{6} ]\n"
            "   = T1_g_float[ bS2{1}, bS3{1}, iS4{6} ]\n   + T2_g_float[ iS5{4}, bS10{1}, iS6{6} ];\n")
    imp = import_nvfuser(text)
    assert "T1: f32[b, b, 6] on m = unsqueeze(T0, dims=[0])" in imp.text
    xs, got = run_all(imp.program)
    np.testing.assert_array_equal(got["T3"], xs["T0"][None] + xs["T2"])
    with pytest.raises(ParseError, match="prints no flags, and T0 has broadcast axes of its own"):
        import_nvfuser(text.replace(", flags = {true, false, false}", ""))
    with pytest.raises(ParseError, match=r"broadcast flags \[False, False, True\] disagree"):
        import_nvfuser(text.replace("{true, false, false}", "{false, false, true}"))


def test_an_output_that_its_own_segment_reads_is_a_result():
    # nvFuser lists T1 among the fusion's outputs although T2 reads it: both are results
    # (an output a later segment reads is that segment's input: tests/test_nvfuser_import.py's seeds)
    text = ("Inputs:\n  T0_g_float[ iS0{4} ]\nOutputs:\n  T1_g_float[ iS1{4} ]\n  T2_g_float[ iS2{4} ]\n"
            "%kernel_math {\nT1_g_float[ iS1{4} ]\n   = expf(T0_g_float[ iS0{4} ]);\n"
            "T2_g_float[ iS2{4} ]\n   = T1_g_float[ iS1{4} ]\n   + T0_g_float[ iS0{4} ];\n} // %kernel_math\n")
    imported = import_nvfuser(text, "two.txt")
    assert "return T1, T2" in imported.text
    xs, got = run_all(imported.program)
    np.testing.assert_array_equal(got["T2"], got["T1"] + xs["T0"])
    np.testing.assert_allclose(got["T1"], np.exp(xs["T0"]), rtol=1e-6)


# ---- a scheduled kernel printed with its transforms --------------------------------------

SCHEDULED = (DATA / "nvfuser_scheduled_kernel.txt").read_text()


def test_a_scheduled_kernel_reads_as_its_transforms_logical_domains():
    """Loop domains of blockIdx, threadIdx and vectorized domains, their extents ceilDivs of
    merges: each TensorView is read as its ` logical domain : (...)` line, the rows split
    over the devices by `Outer split:` (one of them split on into blockIdx)."""
    imported = import_nvfuser(SCHEDULED, "sched.txt")
    types = {e.out: str(e.type) for e in imported.program.funcs[0].eqns}
    assert types == {"T2": "f32[i0@DIDx, i2] on m", "T3": "f32[i0@DIDx] on m", "T4": "f32[i0@DIDx] on m"}
    assert any(n.startswith("T2, T3, T4: printed as a scheduled kernel's loop domain") for n in imported.notes)
    xs, got = run_all(imported.program, {"i0": 5, "i2": 3})  # 5 rows over 2 devices: blocks of 3 and 2
    np.testing.assert_allclose(got["T4"], np.exp((xs["T0"] + xs["T1"]).sum(1)), rtol=1e-6)


def test_a_scheduled_kernel_without_its_transforms_is_refused_and_says_what_to_print():
    bare = SCHEDULED[:SCHEDULED.index("TransformPrinter")]
    with pytest.raises(ParseError, match=r"iblockIdx.x14.*print_transforms\(\)") as e:
        import_nvfuser(bare, "sched.txt")
    assert e.value.loc.line == 14  # T2's printing in the kernel, the first that needs its axes


def test_a_scheduled_device_split_refir_cannot_read_is_an_error_at_its_line():
    # T4's device domain made by splitting a split of the scheduler's (not a logical axis):
    # no logical axis is sharded by it
    moved = SCHEDULED.replace("  Outer split: iS22{i0} by factor 2 -> ideviceIdx.x24{2}, iS25{( ceilDiv(i0, 2) )}\n",
                              "  Outer split: iS30{i9} by factor 2 -> ideviceIdx.x24{2}, iS25{( ceilDiv(i0, 2) )}\n")
    with pytest.raises(ParseError, match=r"cannot map the scheduled T4: its loop domain's device domains "
                                         r"\(ideviceIdx.x24\) are not the device splits"):
        import_nvfuser(moved, "sched.txt")
    odd = SCHEDULED.replace("  Outer split: iS16{i0} by factor 2 -> ideviceIdx.x19{2}",
                            "  Outer split: iS16{( i0 % 3 )} by factor 2 -> ideviceIdx.x19{2}")
    with pytest.raises(ParseError) as e:  # a device's split of an extent refir has no expression for
        import_nvfuser(odd, "sched.txt")
    assert e.value.loc.line == SCHEDULED[:SCHEDULED.index("  Outer split: iS16")].count("\n") + 1
    lost = SCHEDULED.replace(" logical domain : (iS16{i0}, rS18{i2})", " logical domain : (iS16{i0}, rS18{i2 + 1})")
    with pytest.raises(ParseError, match="refir has no extent expressions besides"):
        import_nvfuser(lost, "sched.txt")  # T3's logical domain, unreadable, is what T3 needs


HEADS = (DATA / "nvfuser_head_split_transforms.txt").read_text()


def test_heads_split_over_the_devices_before_their_view_read_as_the_hidden_axis_in_blocks():
    """T0's hidden axis of 24 split into 4 heads of 6 (`Split:`, an inner split), the
    heads over 2 devices, its loop domain those pieces first: read by its logical domain
    as [5, 24@DIDx] (each device two whole heads), and the views into heads and back local."""
    imported = import_nvfuser(HEADS, "heads.txt")
    types = {e.out: str(e.type) for e in imported.program.funcs[0].eqns}
    assert types == {"T1": "f32[5, 4@DIDx, 6] on m", "T2": "f32[5, 4@DIDx, 6] on m", "T3": "f32[5, 24@DIDx] on m"}
    assert "func main(T0: f32[5, 24@DIDx] on m)" in imported.text
    assert any(n.startswith("T0, T3: an axis split into heads whose heads are split over the devices")
               for n in imported.notes)
    assert not [s for s in lower(refir.verify(imported.program)).steps if s.is_communication]
    xs, got = run_all(imported.program)
    assert xs["T0"].shape == (5, 24)
    np.testing.assert_array_equal(got["T3"], np.maximum(xs["T0"], 0))


def test_a_head_split_is_chosen_over_a_device_split_the_loop_domain_does_not_print():
    # nvFuser may keep an allocation domain's direct device split of the axis beside the
    # head split its loop domain shows: the loop domain's device domain says which holds.
    both = HEADS.replace("  Split: iS1{24} by factor 6 -> iS5{4}, iS6{6}\n",
                         "  Outer split: iS1{24} by factor 2 -> ideviceIdx.x40{2}, iS41{12}\n"
                         "  Split: iS1{24} by factor 6 -> iS5{4}, iS6{6}\n")
    assert both != HEADS
    types = {e.out: str(e.type) for e in import_nvfuser(both, "heads.txt").program.funcs[0].eqns}
    assert types["T1"] == "f32[5, 4@DIDx, 6] on m"
    assert "func main(T0: f32[5, 24@DIDx] on m)" in import_nvfuser(both, "heads.txt").text


def test_heads_the_devices_do_not_divide_and_a_head_split_without_its_logical_domain_are_errors():
    odd = HEADS.replace("Split: iS1{24} by factor 6 -> iS5{4}, iS6{6}", "Split: iS1{24} by factor 8 -> iS5{3}, iS6{8}")
    odd = odd.replace("Outer split: iS5{4} by factor 2 -> ideviceIdx.x7{2}, iS8{2}",
                      "Outer split: iS5{3} by factor 2 -> ideviceIdx.x7{2}, iS8{2}")
    with pytest.raises(ParseError, match=r"cannot map 'ideviceIdx.x7': it splits the heads of iS1 \(3\) over 2 "
                                         r"devices") as e:
        import_nvfuser(odd, "heads.txt")
    assert e.value.loc.line == odd[:odd.index("  Outer split: iS5{3}")].count("\n") + 1
    bare = HEADS.replace(" logical domain : (iS0{5}, iS1{24})\n", "")
    with pytest.raises(ParseError, match=r"cannot map T0: its ideviceIdx.x7 splits the heads of a split axis") as e:
        import_nvfuser(bare, "heads.txt")
    assert e.value.loc.line == 15  # the first statement that reads T0
