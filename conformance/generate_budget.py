"""How large the generator's programs may be: at most BUDGET elements per tensor at the
largest binding, static extents drawn from STATIC (shared by every generator module)."""

BUDGET = 64
STATIC = (2, 4, 1, 3, 6, 8)
