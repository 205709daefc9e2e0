"""What a cluster scheduler sees and decides (:mod:`base`), and the generic ones: queue
orders (:mod:`orders`) times placements (:mod:`placement`).  The papers' own
schedulers live with their reproductions (:mod:`mltcp.lab.cluster.papers`)."""
