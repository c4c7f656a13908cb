"""`nodeforge devcloud check`/`status`: every service of the running cloud
answers a real authenticated call (acceptance: status reports all healthy)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from nodeforge.cli import cli
from nodeforge.devcloud.bmc import fleet
from nodeforge.devcloud.cloud import ORDER
from nodeforge.commands.options import add_common_options

add_common_options(cli)


@pytest.mark.devcloud
def test_status_json_reports_every_service_healthy(devcloud):
    result = CliRunner().invoke(cli, ["devcloud", "status", "--output", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["service"] for r in rows] == list(ORDER)
    unhealthy = [r for r in rows if not (r["running"] and r["healthy"])]
    assert not unhealthy
    # Every service listens somewhere, except Magnum's conductor (it only
    # consumes from RabbitMQ).
    assert all(isinstance(r["pid"], int) and (r["ports"] or r["service"] == "magnum-conductor") for r in rows)


@pytest.mark.devcloud
def test_check_makes_a_real_call_per_service(devcloud):
    result = CliRunner().invoke(cli, ["devcloud", "check", "--output", "json"])
    assert result.exit_code == 0, result.output
    rows = {r["service"]: r for r in json.loads(result.output)}
    assert set(rows) == set(ORDER)
    assert all(r["ok"] is True for r in rows.values()), rows
    assert "redfish" in rows["ironic"]["detail"] and "ipmi" in rows["ironic"]["detail"]
    # The fake systems and the machine-backed ones (powered off: no QEMU runs).
    systems = fleet.DEFAULT_REDFISH_COUNT + fleet.DEFAULT_MACHINE_COUNT
    assert rows["redfish-bmc"]["detail"].startswith(f"{systems} systems")
    assert "Chassis Power is" in rows["ipmi-bmc"]["detail"]
