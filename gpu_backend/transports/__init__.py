"""Communications on device buffers: what both transports build on
(device_arrays), every rank in this process and the choice of transport
(in_process), one rank per MPI process (rank_transport, its packing in
packing, its all_to_all and reduce_scatter of runs in run_exchange), the
wires that move bytes between ranks (wires: NCCL or MPI), and the bounded
waits for communications queued on the GPU (pending)."""
