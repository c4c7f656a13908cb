"""Build: the pinned inputs made into disk images.

Render the element tree for the pins (:mod:`.render`), the cached package
base (:mod:`.package_base`), one diskimage-builder root filesystem and both
disk layouts (:mod:`.build`, :mod:`.disk`), the build manifest and SBOM
(:mod:`.manifest`), checksums (:mod:`.checksums`) and the build directory
the later stages read (:mod:`.builddir`).
"""
