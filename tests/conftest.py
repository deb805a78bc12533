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


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Say once why a clone without ../shared skips so many tests: -ra lists
    each skip, but not that one missing folder is the reason for all of them."""
    from helpers import NO_SHARED, SHARED

    n = sum(1 for r in terminalreporter.stats.get("skipped", [])
            if isinstance(r.longrepr, tuple) and (NO_SHARED in r.longrepr[2] or "../shared" in r.longrepr[2]))
    if n:
        where = (f"REFIR_SHARED={os.environ['REFIR_SHARED']} holds no examples/" if os.environ.get("REFIR_SHARED")
                 else f"../shared is not beside the checkout ({SHARED}; CI has it, REFIR_SHARED may point to a copy)")
        terminalreporter.write_line(f"{n} tests skipped: {where}")
