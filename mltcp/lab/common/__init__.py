"""What both lab wings use, under public names: Cassini's algorithm (:mod:`cassini`),
where a result came from (:mod:`provenance`), runs fanned out on local worker processes
or a Dask cluster (:mod:`parallel`, :mod:`distributed`), output directories
(:mod:`outdir`), the lab's TOML files and packaged examples (:mod:`tomlfile`) and the
papers this project reproduces (:mod:`references`).  Imports neither wing."""
