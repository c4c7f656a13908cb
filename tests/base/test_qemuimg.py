"""nodeforge.base.qemuimg against the real qemu-img."""

from __future__ import annotations

import pytest

from nodeforge.base import qemuimg, runner
from nodeforge.errors import NodeforgeError
from tests.prereq import require_tools


def test_convert_info_overlay(tmp_path):
    tools = require_tools("qemu-img", why="the qemu-img helper runs it")
    raw = tmp_path / "disk.raw"
    with open(raw, "wb") as fh:
        fh.truncate(4 << 20)
        fh.seek(1 << 20)
        fh.write(b"nodeforge")
    qcow = qemuimg.convert(raw, tmp_path / "disk.qcow2", src_fmt="raw", dest_fmt="qcow2", qemu_img=tools["qemu-img"])
    assert qemuimg.info(qcow, "qcow2")["format"] == "qcow2"
    assert qemuimg.virtual_size(qcow, "qcow2") == 4 << 20
    over = qemuimg.overlay(qcow, "qcow2", tmp_path / "over.qcow2", 8 << 20)
    info = qemuimg.info(over, "qcow2")
    assert info["virtual-size"] == 8 << 20 and info["backing-filename"] == str(qcow.resolve())


def test_a_failure_carries_the_callers_class(tmp_path):
    require_tools("qemu-img", why="the qemu-img helper runs it")

    class PublishError(NodeforgeError):
        message = "publish: {detail}"

    (tmp_path / "not.qcow2").write_bytes(b"not an image")
    with pytest.raises(PublishError) as exc:
        qemuimg.info(tmp_path / "not.qcow2", "qcow2", error=PublishError)
    assert str(exc.value).startswith("publish: qemu-img failed (exit 1): ")
    with pytest.raises(runner.CommandError):
        qemuimg.virtual_size(tmp_path / "not.qcow2", "qcow2")
