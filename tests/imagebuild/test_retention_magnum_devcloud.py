"""Retention respects the real Magnum: promote with keep=1, expire=delete never deletes an
approved image a cluster template uses (it is hidden instead, the template named), while
an unused one beyond keep is deleted; image show/list name the template in used_by."""

from __future__ import annotations

import datetime
import json
import random

import pytest

from nodeforge import cli
from nodeforge.imageverify import builddir
from nodeforge.publish import catalog, glance as g
from nodeforge.publish.retention import Expire, RetentionPolicy
from tests.imagebuild.builddir_factory import make_build_dir
from tests.imagebuild.glance_fixtures import Tracker
from tests.magnum.live_cloud import LiveCloud

pytestmark = pytest.mark.devcloud


def test_promote_hides_instead_of_deleting_an_image_magnum_uses(devcloud, run_prefix, tmp_path, capsys):
    admin = devcloud.admin()
    tracker, live = Tracker(admin), LiveCloud(devcloud, run_prefix)
    minor = f"1.{random.randint(300, 9999)}"          # a group no one else publishes into
    try:
        ids = []
        for patch in range(3):
            build = builddir.load(tracker.build(make_build_dir(
                tmp_path, k8s=f"{minor}.{patch}", variants=("vm",),
                build_time=datetime.datetime.now(datetime.timezone.utc))))
            ids.append(g.Publisher(admin, RetentionPolicy(), scope="retention-test").publish(build)[0].image_id)
        used, unused, newest = ids
        catalog.promote(admin, used, RetentionPolicy(visible=5, keep=5))
        catalog.promote(admin, unused, RetentionPolicy(visible=5, keep=5))
        t = live.template("ret", g.get_image(admin, used), live.flavor("vm"))

        capsys.readouterr()
        assert cli.main(["--os-cloud", "nodeforge-dev", "image", "show", used, "-o", "json"]) == 0
        assert json.loads(capsys.readouterr().out)["used_by"] == [f"template {t['name']} ({t['uuid']})"]

        policy = RetentionPolicy(visible=1, keep=1, expire=Expire.DELETE)
        plan = {s.image_id: s for s in catalog.plan(admin, newest, policy).steps}
        assert plan[used].action is catalog.Action.HIDE
        assert plan[used].reason == f"beyond keep=1 but used by Magnum: template {t['name']} ({t['uuid']})"
        assert plan[unused].action is catalog.Action.DELETE
        catalog.promote(admin, newest, policy)
        kept = g.get_image(admin, used)
        assert kept["status"] == "active" and kept["os_hidden"] is True         # hidden, not deleted
        with pytest.raises(g.PublishError, match="no image"):
            g.get_image(admin, unused)                                          # unused: deleted as before

        capsys.readouterr()
        assert cli.main(["--os-cloud", "nodeforge-dev", "image", "list", "--all", "--k8s", minor, "-o", "json"]) == 0
        rows = {r["id"]: r["used_by"] for r in json.loads(capsys.readouterr().out)}
        assert rows == {used: [f"template {t['name']} ({t['uuid']})"], newest: []}
    finally:
        live.cleanup()
        tracker.cleanup()
