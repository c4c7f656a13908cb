"""Bare-metal enrollment into Ironic.

Pipeline, one module per stage: :mod:`inventory` (parse + validate a batch),
:mod:`secrets` (credential references), :mod:`preflight` (BMC checks),
:mod:`enroll` (plan desired vs actual, apply), :mod:`lifecycle` (manage ->
inspect -> clean -> provide), :mod:`report` (table, JSON, JUnit XML).
Ironic sits behind :class:`provisioner.Provisioner` (openstacksdk or fake).
"""
