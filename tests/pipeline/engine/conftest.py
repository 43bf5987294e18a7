"""Fixtures of the object-storage tests: one moto S3 server per test module on 127.0.0.1, and
skillpipe pointed at it with this test's mirror cache under ``tmp_path/worker1``."""
from __future__ import annotations

import pytest

from bench.s3_server import S3Server


@pytest.fixture(scope="module")
def s3():
    with S3Server() as server:
        yield server


@pytest.fixture
def env(s3, tmp_path, monkeypatch):
    """The S3 endpoint and credentials in the environment; ``SKILLPIPE_CACHE_DIR`` = tmp_path/worker1."""
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("SKILLPIPE_CACHE_DIR", str(tmp_path / "worker1"))
    return s3
