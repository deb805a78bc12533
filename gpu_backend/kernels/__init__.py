"""The kernels and their planning: index arithmetic (strides), vector loads
(vectors), per-element device functions (functions); elementwise ops and
copies (elementwise, their kernels in elementwise_kernels), the tiled
transpose (transpose), reductions (reduce, their kernels in reduce_kernels
and the device-side folds in reduce_folds), scalar operands (scalars) and
matmul (matmul; cuBLAS called directly: gemm)."""


def forget_plans() -> None:
    """Forget every module's launch plans and kept launches (the elementwise and copy
    plans, the transpose's, the reductions', where's): after a knob or a kernel builder
    changes, nothing worked out before may run again (kernel_probe, the gpu mutants)."""
    from gpu_backend.kernels import elementwise, masks, reduce  # here: the package imports none of them

    elementwise.clear_plans()  # the transpose's plans too
    reduce.clear_plans()
    masks.clear_plans()
