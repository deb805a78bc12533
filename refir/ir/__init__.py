"""The IR: meshes, sharded axes and tensor types (types), ops as frozen dataclasses (ops), programs and
functions (program), the tables each layer attaches to an op class (tables), and the per-program
cache every layer keeps its derived facts in (program_cache)."""
