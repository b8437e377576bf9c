"""DescribeSpotPriceHistory through the shared moto server: moto implements the call (with one
constant price, "0.00001", per offered zone), so the request and its XML response are moto's,
not ours. Price parsing against realistic figures is in tests/unit/test_aws_pricing.py."""

from __future__ import annotations

import os

from orchestrator.clouds.aws import prices as aws_pricing


def test_spot_history_from_moto_is_read_per_zone(moto_server, monkeypatch, tmp_path):
    for key in list(os.environ):
        if key.startswith("AWS_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    prices = aws_pricing.spot_prices("us-east-1", ["g5.xlarge", "no-such.type"])
    assert prices == {"g5.xlarge": 0.00001}
