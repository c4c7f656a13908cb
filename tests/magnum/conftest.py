"""The ``live`` fixture of the Magnum tests on the local cloud: a :class:`LiveCloud` of the test's
own run prefix, everything it made removed afterwards. A module that lets nodeforge make
templates itself (``template apply``) sets ``SWEEP_PREFIXED_TEMPLATES = True``: then every
template under the test's prefix is removed too, not only those the fixture made (opt-in: the
prefix is the test's own, but a module that never applies templates has no reason to sweep)."""

from __future__ import annotations

import pytest

from nodeforge.clients import container_infra as mc
from tests.magnum.live_cloud import LiveCloud


@pytest.fixture
def live(devcloud, run_prefix, request):
    lc = LiveCloud(devcloud, run_prefix)
    try:
        yield lc
    finally:
        if getattr(request.module, "SWEEP_PREFIXED_TEMPLATES", False):
            lc.templates += [t["uuid"] for t in mc.read_templates(lc.admin)
                             if t["name"].startswith(run_prefix) and t["uuid"] not in lc.templates]
        lc.cleanup()
