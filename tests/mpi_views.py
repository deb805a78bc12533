"""explain --json and trace of many programs in one MPI launch (test_explain.py starts it).

    mpiexec -n 4 python tests/mpi_views.py OUT.json PROGRAM.rir ...

Every rank runs both commands on every program; rank 0 writes what each rank
printed, so the test can check that rank 0 alone printed, and what.
"""

import contextlib
import io
import json
import sys

from refir.cli import main
from refir.world.ranks import mpi_world


def printed(argv):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(argv)
    return rc, buf.getvalue()


def views(out_path, programs):
    world = mpi_world()
    mine = {}
    for path in programs:
        mine[path] = {"explain": printed(["explain", path, "--json"]), "trace": printed(["trace", path, "--seed", "3"])}
    every = world.comm.gather(mine, root=0)
    if world.is_root:
        with open(out_path, "w") as f:
            json.dump(every, f)


if __name__ == "__main__":
    views(sys.argv[1], sys.argv[2:])
