"""Device buffers and their memory: a flat device array seen through a layout
(buffer), raw pooled device memory as a pointer (memory), and the size-class
pool behind every allocation, with its byte counts (pool)."""
