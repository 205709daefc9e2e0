"""vClos and OCS-vClos (paper ``vclos``): contention-free placement and routing on a
leaf-spine, the paper's routing baselines (:mod:`schedulers`) and its CLUSTER512
experiment (:mod:`setup`)."""
