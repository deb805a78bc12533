"""numpy execution of refir programs: global (whole arrays) and spmd (per device).

The reference semantics: `impls` (every compute op), `collectives` (every
communication), `global_eval` (a program on whole arrays), `spmd` (the
per-device loop, freeing buffers after their last reader: `liveness`),
`transport` (the in-process transport), `backend` (the spmd backend),
`sentinel` (the receive-buffer sentinel), `numerics` and `error_bounds` (the
numerics model). The MPI transport's engineering is the subpackage
`interp.mpi`.

Op families beyond today's register their rules into those tables from modules of
their own, imported here so that every table is whole wherever interp is used.
"""

from interp import mask_bounds, masks, window_bounds  # noqa: F401  (comparisons, where, iota, unary; windows: error bounds)
