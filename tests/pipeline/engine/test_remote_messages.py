"""What a user is told on an object-storage root (moto's S3 server on loopback): a held lease
names its full ``s3://`` URI, its holder and until when; a missing bucket is named, with or
without ``--input``, in one ``error:`` line and exit code 1."""
from __future__ import annotations

import json
import os
import time

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.core.lease import Lease, LeaseHeld, held_message
from tests.helpers.paths import REPO

SAMPLE = os.path.join(REPO, "data", "samples", "eto-alfworld")


# fixtures s3 and env: tests/pipeline/engine/conftest.py


def flat(output: str) -> str:
    """CLI output with rich's line wrapping and box characters undone."""
    return " ".join(output.replace("│", " ").split())


def test_held_message_names_the_uri_the_holder_the_expiry_and_what_to_do():
    holder = {"pid": 4242, "host": "worker-7", "argv": ["skillpipe", "run", "--shards", "4"],
              "acquired_at": 1_800_000_000.0, "expires_at": 1_800_000_120.0}
    msg = held_message("s3://bkt/pre/runs/x/_locks/memory.shard-00002.json", holder, now=1_800_000_075.0)
    assert msg == ("lease s3://bkt/pre/runs/x/_locks/memory.shard-00002.json is held by pid 4242 on worker-7 "
                   "(skillpipe run --shards 4) until 2027-01-15T08:02:00Z (in 45 s) unless renewed. Another worker "
                   "is running this stage/shard: wait for it to finish. If it was killed, its lease expires by then "
                   "(lifetime 120 s, set by $SKILLPIPE_LEASE_S on the holder; default 120) and a retry or rerun "
                   "after that takes over")


def test_a_held_lease_is_reported_with_its_s3_uri(env):
    fs = env.fs()
    path = f"{env.bucket}/msg/runs/r1/_locks/parse.json"
    held = Lease(fs, path, ttl_s=60).acquire()
    try:
        with pytest.raises(LeaseHeld) as e:
            Lease(fs, path, ttl_s=60).acquire()
        body = json.loads(fs.cat_file(path))
        until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(e.value.holder["expires_at"]))
        assert str(e.value).startswith(f"lease s3://{path} is held by pid {os.getpid()} on {body['host']} (")
        assert f"until {until} (in " in str(e.value) and "$SKILLPIPE_LEASE_S" in str(e.value)
        res = CliRunner().invoke(app, ["run", "--root", env.uri("msg"), "--run-id", "r1", "--input", SAMPLE,
                                       "--stages", "parse"])
        assert res.exit_code == 1
        assert f"error: lease s3://{path} is held by pid {os.getpid()}" in flat(res.output)
    finally:
        held.release()


@pytest.mark.parametrize("extra", [[], ["--input", SAMPLE]], ids=["no_input", "with_input"])
def test_a_missing_bucket_is_named_in_one_error_line(env, extra):
    res = CliRunner().invoke(app, ["run", "--root", "s3://nosuch-bucket/prefix", "--run-id", "x", *extra])
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit)  # a clean exit, no traceback
    assert flat(res.output) == (f"error: --root s3://nosuch-bucket/prefix: bucket 'nosuch-bucket' does not exist at "
                                f"{env.endpoint_url}; create it (`aws s3 mb s3://nosuch-bucket`), or fix --root "
                                "or the endpoint")


def test_an_existing_bucket_without_the_run_asks_for_input_naming_where_it_looked(env):
    res = CliRunner().invoke(app, ["run", "--root", env.uri("empty"), "--run-id", "x"])
    assert res.exit_code == 2
    assert (f"Invalid value for --input: required for a new run ({env.uri('empty')}/runs/x has no parse artifact "
            "to take the previous input from)") in flat(res.output)
