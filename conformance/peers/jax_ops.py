"""JAX's side of the layer ops, standalone: jax_peer runs it, and the reproducers
jax_script writes carry its source (so it imports nothing of refir).
"""

from __future__ import annotations


def jnp_op(op: str, params: list[int], shape: list[int], args: list) -> object:
    """JAX's side of a layer op (standalone: the reproducer carries this source)."""
    import jax.numpy as jnp
    from jax import lax

    x = args[0]
    if op == "select":
        return lax.index_in_dim(x, params[1], axis=params[0], keepdims=False)
    if op == "pad":
        value, *widths = params
        pads = [(widths[2 * i], widths[2 * i + 1]) for i in range(x.ndim)]
        return jnp.pad(x, pads, constant_values=jnp.array((0, 5, -3)[value], x.dtype))
    if op == "expand":
        return jnp.broadcast_to(x, shape)
    if op == "causal":
        i = lax.broadcasted_iota(jnp.int32, shape, len(shape) - 2)
        j = lax.broadcasted_iota(jnp.int32, shape, len(shape) - 1)
        fill = -jnp.inf if jnp.issubdtype(x.dtype, jnp.floating) else -100
        return jnp.where(i >= j, x, jnp.array(fill, x.dtype))
    if op == "compare":
        return getattr(jnp, ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")[params[0]])(
            x, args[1])
    if op == "where":
        return jnp.where(x, args[1], args[2])
    return jnp.matmul(x, args[1], preferred_element_type=x.dtype)
