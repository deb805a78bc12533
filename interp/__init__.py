"""numpy execution of refir programs: global (whole arrays) and spmd (per device)."""
