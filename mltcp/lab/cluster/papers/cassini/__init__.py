"""Cassini in the cluster simulator (paper ``cassini``; sections cited are the
thesis's chapter 4): each link's solution on its unified circle (:mod:`links`), the
scheduler that ranks candidate placements by compatibility (:mod:`schedulers`), the
network scheme that applies time-shifts and corrects their drift (:mod:`timeshifts`),
the Themis stand-in its figures are measured against (:mod:`themis`), and the
Poisson-trace experiment (:mod:`setup`).  The geometric algorithm itself is
:mod:`mltcp.lab.common.cassini`, which the scenario wing's schedule uses too."""
