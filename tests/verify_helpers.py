"""What the negative tests of the spec's constraints share (tests/test_verify*.py):
a program verified must break a label at a line and column, and a small
program's text from its parameters and body."""

import pytest

import refir
from refir.errors import VerifyError

FILE = "prog.rir"


def rejects(text: str, label: str, line: int, col: int, message: str = "") -> VerifyError:
    """Parse and verify `text`; it must break `label` at line:col."""
    with pytest.raises(VerifyError) as info:
        refir.verify(refir.parse(text, FILE))
    err = info.value
    assert err.label == label, str(err)
    assert (err.loc.file, err.loc.line, err.loc.col) == (FILE, line, col), str(err)
    shown = str(err).split("\n")
    assert shown[0] == f"{FILE}:{line}:{col}"
    assert shown[1] == "    " + text.split("\n")[line - 1]
    assert shown[2] == "    " + " " * (col - 1) + "^"
    assert shown[3].startswith(f"verify error [{label}]: ")
    assert message in err.message, err.message
    return err


def prog(params: str, *body: str, mesh: str = "mesh m = [0, 1]") -> str:
    """`mesh` on line 1, `func main(params) {` on line 2, body from line 3 (col 3)."""
    lines = [mesh, f"func main({params}) {{", *(f"  {b}" for b in body), "}"]
    return "\n".join(lines) + "\n"
