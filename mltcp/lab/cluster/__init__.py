"""The cluster wing: a GPU cluster's jobs arrive, wait, get GPUs, train and leave.

Layers, each importing only those above it:

* :mod:`engine` -- the simulator itself: the fabric (:mod:`~engine.leafspine`), jobs
  placed on GPUs and their traffic (:mod:`~engine.gpu_jobs`), network schemes
  (:mod:`~engine.network`) and the loop (:mod:`~engine.simulator`) over the fluid
  engine (:mod:`mltcp.lab.models.fluid_engine`);
* :mod:`arrivals` -- what arrives: the catalogue of models and job traces;
* :mod:`schedulers` -- the scheduler interface and the generic queue orders and
  placements;
* :mod:`papers` -- each paper's reproduction in its own package (its schedulers,
  network schemes, setup and reported figures) and the comparison with its figures;
* :mod:`experiments` -- a TOML experiment: schedulers and schemes by name, the runs,
  the report.
"""
