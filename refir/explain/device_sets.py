"""Sets of devices in words that stay short on a mesh of thousands: `(0 1 2 3)`,
`(0..1023)`, `(0..240 step 16)`, runs around a count. Used by explain's pictures
and lower's listing (no rich here: `lower` does not import it)."""

from __future__ import annotations


def devices_text(ds: tuple[int, ...] | list[int], most: int = 16) -> str:
    """`(0 1 2 3)`; past `most` devices, an even progression as `0..1023` or
    `0..240 step 16`, else runs of consecutive ids, and past 8 runs the first and last
    ones around the count."""
    if len(ds) <= most:
        return "(" + " ".join(map(str, ds)) + ")"
    step = ds[1] - ds[0]
    if step > 0 and all(b - a == step for a, b in zip(ds, ds[1:])):
        return f"({ds[0]}..{ds[-1]}{f' step {step}' if step > 1 else ''})"
    runs: list[list[int]] = []
    for d in ds:
        if runs and d == runs[-1][1] + 1:
            runs[-1][1] = d
        else:
            runs.append([d, d])
    words = [str(a) if a == b else f"{a}..{b}" for a, b in runs]
    if len(words) > 8:
        words = [*words[:6], "...", *words[-2:], f"[{len(ds)} devices]"]
    return "(" + " ".join(words) + ")"
