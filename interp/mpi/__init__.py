"""The MPI transport: one rank per process, through mpi4py, with the bits of the
in-process transport (interp/transport.py's `InProcess`, which runs the spec
of every communication, interp/collectives.py's `exchange`).

The modules, from the entry point down:

- `transport`: `MpiTransport`, what spmd (interp/backend.py) and the gpu
  backend's wires call; one rule per communication op (`MPI_RULES`), the
  rooted and point-to-point ones (gather, reduce, broadcast, scatter,
  send_recv) made there, the others by their plans.
- `plans`: the registry of plans (`planned`: one per op, type, team and rank,
  worked out once from the types) and the plans of allgather, allreduce and
  reduce_scatter.
- `all_to_all`: all_to_all's plans, of equal and of uneven pieces.
- `run_exchange`: the plan of an all_to_all or reduce_scatter whose blocks
  are runs (an interleaved axis, spec §3.4): pieces packed by their runs, one
  Ialltoallv, each piece put at its runs or the pieces folded.
- `layout`: where blocks and pieces lie in the bytes that cross (C order, the
  communicated axis first), and what packs or writes them there.
- `pools`: results and scratch buffers kept between calls.
- `shared_windows`: a team's shared-memory window and its members' result
  slots, where every member runs on one node.
- `nodes`: whether a team's members share a node: the machine's, or
  simulated ones (REFIR_MPI_NODE_RANKS=K: every K world ranks a node), so that
  the path across nodes runs on one machine too.
- `host_copy`, `row_runs`: numba copies on the host: a strided array into C
  order (tiled), and runs of rows into dense arrays of their own.

How a message travels: spmd hands `MpiTransport.communicate` this rank's
buffer. The first call for an (op, source type, result type) forms this rank's
teams (refir.lowering.teams) and, for an allgather, allreduce, reduce_scatter
or all_to_all in which this rank sends and receives in one team, takes the
op's plan; later calls go straight to it. The plan moves the buffer's bytes
one of three ways, the same choice on every member (from the types, the team
and the node): through MPI's collective on the team's communicator
(refir.world.mpi_job.COMMS), sent from the buffer's own memory or packed by
one copy into a scratch buffer; where the team shares a node, through its
shared-memory window (each member writes its part in the layout the receivers
want, one barrier, each copies what it receives out of the others' segments,
or a reduce_scatter folds it straight out of them); or, past 256 KiB a block,
straight out of or into the members' result slots. Reductions fold in team
order (interp.impls.fold), never by MPI's own. Every wait is a bounded poll
(refir.world.mpi_job.wait). The result goes back to spmd as this rank's buffer
(`pools.handed_out`). Only bytes move and the folds are the reference's, so
the bits are the in-process transport's.
"""
