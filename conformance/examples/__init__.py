"""Example backends for `python -m refir conform --backend module:callable`."""
