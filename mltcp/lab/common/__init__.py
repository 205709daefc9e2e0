"""What both lab wings use, under public names: Cassini's algorithm (:mod:`cassini`),
where a result came from (:mod:`provenance`), the connection to a Dask cluster
(:mod:`distributed`), output directories (:mod:`outdir`) and the papers this project
reproduces (:mod:`references`).  Imports neither wing."""
