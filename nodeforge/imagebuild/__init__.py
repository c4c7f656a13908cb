"""Node image inputs: the version lockfile, artifact sources, the download cache,
and the Kubernetes release watch (``nodeforge release``)."""
