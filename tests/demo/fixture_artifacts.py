"""Moved to :mod:`nodeforge.demo.fixtures` (``make demo`` uses it); kept for
existing imports (tests/image_fixture.py, bench/bench_build.py, boot tests)."""

from nodeforge.demo.fixtures import (  # noqa: F401
    CNI_PLUGINS, COMPANIONS, KUBERNETES, MTIME, DemoUpstream, artifact_bytes, main, make_demo, publish_patch,
    write_sources)

if __name__ == "__main__":
    raise SystemExit(main())
