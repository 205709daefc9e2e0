"""The cluster simulator's engine: the fabric, placed jobs and their traffic, the
network schemes and the loop.  Imports nothing else of the cluster wing."""
