"""The papers' cluster experiments, reproduced: one package per paper, named by its key
(:mod:`mltcp.lab.common.references`; a package name spells ``-`` as ``_``).

* :mod:`cassini` -- Cassini (the thesis's chapter 4): link solutions on unified
  circles, placements ranked by compatibility, time-shifts with drift correction;
* :mod:`vclos` -- vClos and OCS-vClos, and the paper's routing baselines;
* :mod:`ada_srsf` -- LWF-kappa placement, AdaDUAL's communication order, Ada-SRSF and
  SRSF(n);
* :mod:`deepshare_rl` -- the RL contention-aware scheduler: contention sensitivity, its
  cluster and traces, the Gymnasium environment, training and the shipped policy.

Each has a ``setup`` module: the paper's experiment as data and its reported figures
(:class:`figures.PaperSetup`); :mod:`setups` lists them by name and :mod:`compare` puts
the papers' figures next to ours.  A new reproduction is one more package here, its
schedulers and schemes registered in :mod:`mltcp.lab.cluster.experiments.registry`.
"""
