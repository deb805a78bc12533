"""`python -m refir`: see refir/cli.py. Under MPI an error anywhere ends every rank."""

import sys

from refir.cli import main
from refir.world.ranks import abort_on_error

sys.exit(abort_on_error(main))
