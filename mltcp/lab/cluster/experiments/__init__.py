"""A cluster experiment: the TOML file (:mod:`config`), schedulers and network schemes
by name (:mod:`registry`), every run (:mod:`runner`, here or on Dask) and the report
(:mod:`report`)."""
