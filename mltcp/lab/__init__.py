"""The researchers' lab: two wings of equal standing on one shared room and the models.

* :mod:`~mltcp.lab.scenario` -- the scenario wing: a scenario file (a few jobs on a
  topology) resolved into plans, run on a backend (fluid, dcqcn, ns3, netns, hosts),
  written as the common trace, measured and reported;
* :mod:`~mltcp.lab.cluster` -- the cluster wing: thousands of jobs arriving at a GPU
  cluster, a scheduler placing them, the fluid engine sharing links, the papers'
  cluster experiments reproduced;
* :mod:`~mltcp.lab.common` -- what both wings use: Cassini's algorithm, provenance,
  the connection to a Dask cluster, output directories, the papers' references;
* :mod:`~mltcp.lab.models` -- the engines both wings drive (the fluid engine, the DCQCN
  model), which know neither plans nor clusters.

The wings never import each other (``tests/test_architecture.py``).
"""
