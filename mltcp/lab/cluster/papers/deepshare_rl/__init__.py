"""The RL network-contention-aware scheduler (paper ``deepshare-rl``).

* :mod:`setup` -- its cluster, its four traces of 256-job sets, node-set placements,
  LAS/SRTF as it runs them, and its figures;
* :mod:`contention` -- contention sensitivity (Eq. 1, Fig. 1) measured by the fluid
  engine;
* :mod:`encoding` -- the state, candidates, actions, masks and the CS meter, one
  definition for training and deployment;
* :mod:`gym_env` -- the Gymnasium environment over the simulator (Eq. 2, and our JCT
  term); :mod:`train` -- MaskablePPO training; :mod:`selection` -- checkpoint selection
  on held-out job sets; :mod:`imitation` -- a warm start that imitates a rule;
  :mod:`schedulers` -- RL-base, RL-Hybrid and rule ablations; ``policies/`` -- the
  shipped policies.
"""
