"""Fixtures for the bare-metal tests: data files and a known BMC password."""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
# Every inventory under data/ reads its password from this variable.
TEST_PASSWORD = "pw-test-Leak-8d1f2c"


@pytest.fixture
def data_dir() -> Path:
    return DATA


@pytest.fixture
def bmc_password(monkeypatch) -> str:
    monkeypatch.setenv("NF_TEST_BMC_PASSWORD", TEST_PASSWORD)
    return TEST_PASSWORD
