"""deepshare-rl Fig. 1: contention sensitivity of every pair of its models in every pair of
job shapes (2 or 4 nodes x 1, 2 or 4 GPUs), under fair sharing and under MLTCP, measured
by the fluid engine on deepshare-rl's cluster
(mltcp.lab.cluster.papers.deepshare_rl.contention.cs_grid).

    python bench/bench_cs_grid.py --out bench/results/cs-grid.json

Writes the grids as JSON, the figure (cs-grid.png and .pdf, deepshare-rl Fig. 1's layout)
next to it, and
prints each model pair's maximum CS, both networks, next to the paper's stated maxima.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from mltcp.lab.cluster.papers.deepshare_rl import contention

# deepshare-rl §I/§III: maxima over its placements (target, co-located) -> CS
PAPER_MAXIMA = {("deepshare/fsdp", "deepshare/moe"): 1.96,
                ("deepshare/moe", "deepshare/fsdp"): 3.00,
                ("deepshare/fsdp", "deepshare/img"): 1.35,
                ("deepshare/img", "deepshare/fsdp"): 1.43}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--out", default="bench/results/cs-grid.json")
    a = p.parse_args()
    started = time.monotonic()
    grids = []
    for net in ("fair", "mltcp"):
        grids.append(contention.cs_grid(network=net, iterations=a.iterations))
        print(f"{net}: {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": " ".join(sys.argv), "iterations": a.iterations,
                               "grids": [g.to_json() for g in grids],
                               "wall_s": time.monotonic() - started}, indent=1) + "\n")
    contention.plot_cs_grids(grids, str(out.with_suffix(".png")))
    models = grids[0].models
    print("| target \\ co-located | " + " | ".join(m.split("/")[1] for m in models) + " |")
    print("|---" * (len(models) + 1) + "|")
    for t in models:
        cells = []
        for c in models:
            fair, ml = (g.maximum(t, c) for g in grids)
            paper = PAPER_MAXIMA.get((t, c))
            cells.append(f"{fair:.2f} / {ml:.2f}" + (f" (paper {paper})" if paper else ""))
        print(f"| {t.split('/')[1]} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
