"""Magnum: the cluster-template and cluster side of the chain.

* :mod:`nodeforge.magnum.drivers`: the known Magnum drivers and the
  (server_type, os_distro, coe) tuples each serves.
"""
