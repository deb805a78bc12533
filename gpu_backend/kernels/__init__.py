"""The kernels and their planning: index arithmetic (strides), vector loads
(vectors), per-element device functions (functions); elementwise ops and
copies (elementwise, their kernels in elementwise_kernels), the tiled
transpose (transpose), reductions (reduce, their kernels in reduce_kernels
and the device-side folds in reduce_folds), scalar operands (scalars) and
matmul (matmul; cuBLAS called directly: gemm)."""
