"""A real S3-protocol server on 127.0.0.1 for tests: ``moto`` in server mode, in its own process.

``with S3Server() as s3:`` starts ``python -m moto.server`` on a free port, waits until it
answers, creates the bucket ``s3.bucket`` and stops the process on exit. ``s3.env()`` gives the
environment a ``skillpipe`` process (or ``monkeypatch``) needs to reach it: dummy credentials and
``SKILLPIPE_STORAGE_OPTIONS`` naming the endpoint; ``s3.fs()`` an ``s3fs`` filesystem on it.
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    """moto's S3 server on loopback with one bucket (``bucket``); ``endpoint_url`` once started."""

    def __init__(self, bucket: str = "skillpipe-test", start_timeout_s: float = 20.0):
        self.bucket, self.start_timeout_s = bucket, start_timeout_s
        self.port = free_port()
        self.endpoint_url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "S3Server":
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.__exit__()
                    raise RuntimeError(f"moto server did not start on port {self.port}")
                time.sleep(0.05)
        import boto3
        boto3.client("s3", endpoint_url=self.endpoint_url, aws_access_key_id="testing",
                     aws_secret_access_key="testing", region_name="us-east-1").create_bucket(Bucket=self.bucket)
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
            self.proc = None

    def storage_options(self) -> dict:
        return {"client_kwargs": {"endpoint_url": self.endpoint_url}, "key": "testing", "secret": "testing"}

    def env(self) -> dict[str, str]:
        """Environment variables that point skillpipe (and botocore) at this server."""
        return {**CREDENTIALS, "SKILLPIPE_STORAGE_OPTIONS": json.dumps(self.storage_options())}

    def fs(self):
        import s3fs
        return s3fs.S3FileSystem(skip_instance_cache=True, **self.storage_options())

    def uri(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix}"
