"""Test setup shared by every test file.

The CUDA simulator must be chosen before numba is first imported, so it is set
here, at the very top. CI has no GPU; on a GPU machine set
NUMBA_ENABLE_CUDASIM=0 to test the real target.
"""

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
# Transports fill receive buffers with the sentinel first (interp/sentinel.py), as in conform runs.
os.environ.setdefault("REFIR_SENTINEL", "1")

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "ci",
    deadline=None,
    max_examples=20,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
