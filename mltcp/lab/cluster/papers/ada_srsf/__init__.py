"""Ada-SRSF (paper ``ada-srsf``): LWF-kappa placement (:mod:`lwf`), AdaDUAL's
communication order and SRSF(n) (:mod:`schedulers`), and the 64-GPU experiment
(:mod:`setup`)."""
