"""What refir shows of a program: `explain` (report), `lower`'s listing, `trace`, the placement
facts they share, and the pictures (text grids, SVG/HTML drawings, refir.visualize)."""
