"""Publish: verified images into Glance, and the catalog template authors read.

Upload with the package manifest and signature (:mod:`.glance`,
:mod:`.signing`), approval and retirement (:mod:`.catalog`) under a
retention policy (:mod:`.retention`).
"""
