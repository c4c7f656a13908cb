"""The OS package lock: every Debian package in a node image pinned by name,
version, architecture and the sha256 the archive's signed index publishes.

* :mod:`.archive` fetches a suite's ``InRelease``, verifies its signature with
  ``gpgv`` against the archive keyring and takes the ``Packages`` index hashes
  only from the verified text;
* :mod:`.resolve` resolves the package set with real apt in a throwaway apt
  root fed only the verified indexes;
* :mod:`.lock` reads and writes the lock file (``manifests/os-packages.lock.yaml``);
* :mod:`.watch` compares a lock with the current indexes (the release trigger),
  moves it, and checks ``.deb`` files against it.

This package does not import :mod:`nodeforge.imagebuild`; the image build and
the ``release`` commands call into it. See ``docs/os-packages.md``.
"""
