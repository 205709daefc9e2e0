"""Contention sensitivity (deepshare-rl Eq. 1, Fig. 1) measured by the fluid engine."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from mltcp.core.errors import SpecError
from mltcp.lab.cluster.arrivals import catalogue
from mltcp.lab.cluster.papers.deepshare_rl.contention import (
    PAPER_MODELS,
    contention_sensitivity,
    cs_grid,
    cs_table,
    paper_fabric,
)

ITERATIONS = 12


@pytest.fixture(scope="module")
def tables():
    return {net: cs_table(network=net, iterations=ITERATIONS) for net in ("fair", "mltcp")}


def _compatible(name: str, compute_s: float, comm_s: float) -> catalogue.ModelProfile:
    """A hand-made model whose ring all-reduce on 4 of the paper's nodes takes ``comm_s`` alone."""
    fabric = paper_fabric()
    ring_share = 2 * (4 - 1) / 4
    nbytes = comm_s * fabric.server_payload_bytes_s / ring_share
    return dataclasses.replace(catalogue.profile("deepshare/lm"), name=name,
                               compute_s=compute_s, gradient_bytes=nbytes)


def test_paper_models_are_table_one():
    assert [m.split("/")[1] for m in PAPER_MODELS] == ["gnn", "img", "dlrm", "lm", "fsdp", "moe"]


def test_cs_at_least_one_everywhere(tables):
    for table in tables.values():
        for row in table.cs:
            assert all(x >= 1 - 1e-9 for x in row)
        for p in table.pairs:
            assert p.together_a_s >= p.alone_a_s * (1 - 1e-9)
            assert p.together_b_s >= p.alone_b_s * (1 - 1e-9)


@pytest.mark.parametrize("gpus,placement", [((2, 4), "disjoint"), ((1, 4), "shared")])
def test_no_shared_traffic_means_cs_one(gpus, placement):
    # Other servers, or jobs on one server (no network traffic at all).
    p = contention_sensitivity("deepshare/fsdp", "deepshare/moe", gpus=gpus,
                               placement=placement, iterations=ITERATIONS)
    assert p.cs_a == pytest.approx(1, abs=1e-9)
    assert p.cs_b == pytest.approx(1, abs=1e-9)


def test_communication_heavy_pair_is_sensitive_under_fair(tables):
    fair = tables["fair"]
    i, j = fair.models.index("deepshare/fsdp"), fair.models.index("deepshare/moe")
    assert fair.cs[i][j] > 1.3 and fair.cs[j][i] > 1.3
    # ... and more than a light model next to it (deepshare-rl §III: GNN stays near 1).
    g = fair.models.index("deepshare/gnn")
    assert fair.cs[g][i] < 1.05 < fair.cs[i][j]


def test_partial_sharing_between_disjoint_and_shared():
    cs = {pl: contention_sensitivity("deepshare/fsdp", "deepshare/moe", gpus=(2, 4),
                                     placement=pl, iterations=ITERATIONS).cs_a
          for pl in ("disjoint", "partial", "shared")}
    assert cs["disjoint"] < cs["partial"] <= cs["shared"] + 1e-9


def test_pair_order_does_not_matter(tables):
    for net in ("fair", "mltcp"):
        ab = contention_sensitivity("deepshare/lm", "deepshare/moe", network=net,
                                    iterations=ITERATIONS)
        ba = contention_sensitivity("deepshare/moe", "deepshare/lm", network=net,
                                    iterations=ITERATIONS)
        assert ab == ba.swapped()
        t = tables[net]
        i, j = t.models.index("deepshare/lm"), t.models.index("deepshare/moe")
        assert (t.cs[i][j], t.cs[j][i]) == (ab.cs_a, ab.cs_b)


def test_table_runs_each_unordered_pair_once(tables):
    k = len(PAPER_MODELS)
    assert len(tables["fair"].pairs) == k * (k + 1) // 2


def test_mltcp_table_uses_the_same_placements(tables):
    fair, ml = tables["fair"], tables["mltcp"]
    assert (fair.network, ml.network) == ("fair", "mltcp")
    assert (fair.models, fair.placement, fair.gpus) == (ml.models, ml.placement, ml.gpus)
    for pf, pm in zip(fair.pairs, ml.pairs, strict=True):
        assert (pf.model_a, pf.model_b) == (pm.model_a, pm.model_b)
        # Alone, each ring flow has its NICs to itself: same GPUs, paths and times.
        assert pf.alone_a_s == pytest.approx(pm.alone_a_s, rel=1e-9)
        assert pf.alone_b_s == pytest.approx(pm.alone_b_s, rel=1e-9)


def test_fair_overlap_of_identical_jobs_matches_closed_form():
    # Started together, two identical jobs communicate at once at half rate: C + 2X.
    c, x = 0.3, 0.1
    m = _compatible("test/compatible", c, x)
    p = contention_sensitivity(m, m, iterations=ITERATIONS)
    assert p.alone_a_s == pytest.approx(c + x, rel=1e-3)
    assert p.cs_a == pytest.approx((c + 2 * x) / (c + x), rel=0.02)


def test_mltcp_interleaves_compatible_identical_jobs():
    m = _compatible("test/compatible", 0.3, 0.1)      # communication < half the iteration
    fair = contention_sensitivity(m, m, network="fair", iterations=30)
    ml = contention_sensitivity(m, m, network="mltcp", iterations=30)
    assert max(ml.cs_a, ml.cs_b) < min(fair.cs_a, fair.cs_b) - 0.1
    assert max(ml.cs_a, ml.cs_b) < 1.05


def test_renderings(tables):
    t = tables["fair"]
    lines = t.markdown().splitlines()
    assert len(lines) == 2 + len(t.models)
    assert lines[2].startswith("| gnn |")
    data = json.loads(t.to_json())
    assert data["cs"] == [list(r) for r in t.cs]
    assert len(data["pairs"]) == len(t.pairs)


@pytest.mark.parametrize("kwargs,field", [
    ({"model_a": "deepshare/nope"}, "model"),
    ({"gpus": (5, 4)}, "gpus.nodes"),
    ({"gpus": (4, 5)}, "gpus.per_node"),
    ({"gpus": (0, 4)}, "gpus.nodes"),
    ({"gpus": 16}, "gpus"),
    ({"gpus": (3, 4), "placement": "disjoint"}, "gpus.nodes"),
    ({"placement": "sideways"}, "placement"),
    ({"network": "cassini"}, "network"),
    ({"network": "nope"}, "network"),
    ({"iterations": 1}, "iterations"),
])
def test_bad_input_is_one_line_spec_error(kwargs, field):
    args = {"model_a": "deepshare/lm", "model_b": "deepshare/moe"} | kwargs
    with pytest.raises(SpecError) as err:
        contention_sensitivity(**args)
    assert err.value.field == field
    assert "\n" not in str(err.value)


def test_table_refuses_repeated_models():
    with pytest.raises(SpecError) as err:
        cs_table(["deepshare/lm", "deepshare/lm"])
    assert err.value.field == "models"


# --- deepshare-rl Fig. 1's grids: jobs of different shapes


def test_jobs_of_different_shapes_share_their_common_nodes():
    p = contention_sensitivity("deepshare/fsdp", "deepshare/moe", gpus=(2, 2), gpus_b=(4, 1),
                               iterations=ITERATIONS)
    q = contention_sensitivity("deepshare/moe", "deepshare/fsdp", gpus=(4, 1), gpus_b=(2, 2),
                               iterations=ITERATIONS)
    assert p.gpus == (2, 2) and p.gpus_b == (4, 1)
    assert (q.cs_a, q.cs_b) == pytest.approx((p.cs_b, p.cs_a))     # order does not matter
    assert p.cs_a > 1.2 and p.cs_b > 1.2


def test_a_shared_node_must_hold_both_jobs():
    with pytest.raises(SpecError, match="gpus.per_node"):
        contention_sensitivity("deepshare/lm", "deepshare/lm", gpus=(2, 4), gpus_b=(2, 6))
    with pytest.raises(SpecError, match="gpus_b"):
        contention_sensitivity("deepshare/lm", "deepshare/lm", gpus_b=(3,))


def test_grid_cells_are_the_pairs_cs():
    shapes = ((2, 2), (4, 2))
    grid = cs_grid(("deepshare/lm", "deepshare/fsdp"), iterations=ITERATIONS, shapes=shapes)
    p = contention_sensitivity("deepshare/fsdp", "deepshare/lm", gpus=(4, 2), gpus_b=(2, 2),
                               iterations=ITERATIONS)
    assert grid.block("deepshare/fsdp", "deepshare/lm")[1, 0] == pytest.approx(p.cs_a)
    assert grid.block("deepshare/lm", "deepshare/fsdp")[0, 1] == pytest.approx(p.cs_b)
    assert grid.maximum("deepshare/fsdp", "deepshare/lm") >= p.cs_a
    assert not np.isnan(grid.block("deepshare/lm", "deepshare/lm")).any()
    # the NIC carries a server's ring share whatever its GPU count: GPUs per node do not
    # change CS in this model, nodes do
    wide = cs_grid(("deepshare/fsdp",), iterations=ITERATIONS,
                   shapes=((2, 1), (2, 4), (4, 1)))
    b = wide.block("deepshare/fsdp", "deepshare/fsdp")
    assert b[0, 2] == pytest.approx(b[1, 2], rel=1e-3)
    assert b[0, 0] != pytest.approx(b[0, 2], rel=1e-3)


def test_the_grid_figure_is_written_as_png_and_pdf(tmp_path):
    from mltcp.lab.cluster.papers.deepshare_rl.contention import CSGrid, plot_cs_grids

    shapes = ((2, 1), (4, 1))
    cs = tuple(tuple(np.full((2, 2), 1.0 + 0.1 * (i + j)) for j in range(2)) for i in range(2))
    grids = [CSGrid(("deepshare/lm", "deepshare/fsdp"), net, shapes, cs)
             for net in ("fair", "mltcp")]
    written = plot_cs_grids(grids, str(tmp_path / "cs-grid.png"))
    assert written == [tmp_path / "cs-grid.png", tmp_path / "cs-grid.pdf"]
    assert (tmp_path / "cs-grid.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "cs-grid.pdf").read_bytes()[:5] == b"%PDF-"
