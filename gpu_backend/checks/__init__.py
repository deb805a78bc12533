"""refir against torch DTensor on real GPUs, run by device_session.sh: every
local block of a redistribute compared (dtensor), and uneven blocks next to
DTensor's (dtensor_uneven)."""
