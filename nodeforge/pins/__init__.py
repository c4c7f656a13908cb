"""Pins: what goes into a node image, and where it comes from.

The version lockfile (:mod:`.lockfile`), the artifact sources and mirrors
(:mod:`.sources`), the verified download cache (:mod:`.cache`) and the
Kubernetes release watch behind ``nodeforge release`` (:mod:`.release`).
The first stage of the image pipeline: pins -> build -> verify -> publish.
"""
