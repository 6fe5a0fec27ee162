"""``gpuprov pricing spot-advisor refresh``: AWS's public Spot Advisor feed, replayed with ``responses``.

The recorded body is ``tests/fixtures/aws/spot-advisor-data.json``: the bundled feed (a verbatim,
GPU-filtered copy of the real one) with one pool's bucket changed (p4d.24xlarge us-east-1 Linux,
10-15% → <5%) and three non-GPU pools as the unfiltered feed carries them (see its PROVENANCE).
Expectations are read from the JSON files here, not from pricing.spot_risk.
"""

from __future__ import annotations

import json
import threading
from decimal import Decimal as D
from typing import Any

import pytest
import responses
from typer.testing import CliRunner

from gpuprov.cli import app
from gpuprov.plandoc import from_json
from gpuprov.store.spot_advisor import SpotAdvisorStore
from pricing import spot_advisor
from pricing.base import SourceError
from tests.conftest import ROOT

runner = CliRunner()
FIXTURE = ROOT / "tests" / "fixtures" / "aws" / "spot-advisor-data.json"
BUNDLE = ROOT / "pricing" / "data" / "spot-advisor.json"
URL = spot_advisor.FEED_URL
NON_GPU = {
    ("us-east-1", "Linux", "m5.large"),
    ("us-east-1", "Linux", "c5.xlarge"),
    ("us-west-2", "Windows", "m5.large"),
}
MIDPOINT = {"<5%": D("0.025"), "5-10%": D("0.075"), "10-15%": D("0.125"), "15-20%": D("0.175"), ">20%": D("0.25")}


def _load(path: Any) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def _label(data: dict[str, Any], bucket: int) -> str:
    [label] = [r["label"] for r in data["ranges"] if r["index"] == bucket]
    return str(label)


def _serve(body: bytes | str, status: int = 200) -> None:
    responses.add(responses.GET, URL, body=body, status=status, content_type="application/json")


def _spot(gpu: str = "a100-40gb") -> list[dict[str, Any]]:
    r = runner.invoke(app, ["prices", "--type", gpu, "--cloud", "aws", "--market", "spot", "-o", "json"])
    assert r.exit_code == 0, r.stderr
    offers: list[dict[str, Any]] = json.loads(r.stdout)["offers"]
    return offers


def test_the_fixture_is_the_bundle_with_one_pool_changed_and_non_gpu_pools_added() -> None:
    fixture, bundle = _load(FIXTURE), _load(BUNDLE)
    diff = {
        (region, os_name, itype)
        for region, by_os in fixture["spot_advisor"].items()
        for os_name, pools in by_os.items()
        for itype, pool in pools.items()
        if bundle["spot_advisor"].get(region, {}).get(os_name, {}).get(itype) != pool
    }
    assert diff == NON_GPU | {("us-east-1", "Linux", "p4d.24xlarge")}
    assert bundle["spot_advisor"]["us-east-1"]["Linux"]["p4d.24xlarge"]["r"] == 2
    assert fixture["spot_advisor"]["us-east-1"]["Linux"]["p4d.24xlarge"]["r"] == 0


@responses.activate
def test_fetch_keeps_the_gpu_families_only() -> None:
    _serve(FIXTURE.read_bytes())
    feed = spot_advisor.fetch()
    expected = _load(FIXTURE)
    for region, os_name, itype in NON_GPU:
        del expected["spot_advisor"][region][os_name][itype]
    for itype in ("m5.large", "c5.xlarge"):
        del expected["instance_types"][itype]
    assert feed == expected
    assert len(responses.calls) == 1


@responses.activate
def test_refresh_stores_the_feed_and_prices_and_plans_read_the_new_rate() -> None:
    before = [o for o in _spot() if o["region"] == "us-east-1" and o["instance_type"] == "p4d.24xlarge"]
    assert before and {o["interruption_source"] for o in before} == {"aws-spot-advisor:10-15% bundled 2025-06-28"}
    assert {D(o["interruptions_per_hour"]) for o in before} == {D("0.125") / 730}

    _serve(FIXTURE.read_bytes())
    r = runner.invoke(app, ["pricing", "spot-advisor", "refresh"])
    assert r.exit_code == 0, r.stderr
    assert "682 GPU Linux pools" in r.stdout and "1 new or changed" in r.stdout
    stored = SpotAdvisorStore().load()
    assert stored is not None and stored[2] == URL
    day = f"{stored[1]:%Y-%m-%d}"

    fixture = _load(FIXTURE)
    offers = _spot()
    assert offers
    for o in offers:  # every AWS spot pool reads the refreshed feed, the changed one included
        pool = fixture["spot_advisor"].get(o["region"], {}).get("Linux", {}).get(o["instance_type"])
        if pool is None:
            assert o["interruption_source"] == "default:aws"
            continue
        label = _label(fixture, pool["r"])
        assert o["interruption_source"] == f"aws-spot-advisor:{label} fetched {day}"
        assert D(o["interruptions_per_hour"]) == MIDPOINT[label] / 730
    changed = [o for o in offers if o["region"] == "us-east-1" and o["instance_type"] == "p4d.24xlarge"]
    assert changed and {o["interruption_source"] for o in changed} == {f"aws-spot-advisor:<5% fetched {day}"}

    r = runner.invoke(
        app,
        ["plan", "--gpus", "16", "--type", "a100-40gb", "--clouds", "aws", "--region", "us-east-1", "-o", "json"],
    )
    assert r.exit_code == 0, r.stderr
    plan = from_json(r.stdout)
    spot = [a for a in plan.allocations if a.spot]
    assert spot and all(a.instance_type == "p4d.24xlarge" for a in spot)
    for a in spot:
        assert (a.interruptions_per_hour, a.interruption_source) == (
            D("0.025") / 730,
            f"aws-spot-advisor:<5% fetched {day}",
        )
    rate = D("0.025") / 730
    expected = sum((a.unit_hourly_usd * rate * sum(a.instances_by_slot) for a in spot), D(0))
    assert plan.costs.expected_interruption_usd == expected

    r = runner.invoke(app, ["pricing", "spot-advisor", "show", "-o", "json"])
    assert r.exit_code == 0, r.stderr
    shown = json.loads(r.stdout)
    assert shown["origin"] == f"fetched {day}" and shown["linux_pools"] == 682
    linux = [p["r"] for by_os in fixture["spot_advisor"].values() for t, p in by_os["Linux"].items() if "." in t]
    gpu_linux = [
        p["r"]
        for region, by_os in fixture["spot_advisor"].items()
        for t, p in by_os["Linux"].items()
        if (region, "Linux", t) not in NON_GPU
    ]
    assert len(linux) == 684 and len(gpu_linux) == 682
    assert shown["buckets"] == {_label(fixture, i): gpu_linux.count(i) for i in range(5)}


BAD_FEEDS = {
    "not JSON": b"<html>Access Denied</html>",
    "not an object": b"[1, 2, 3]",
    "no ranges": json.dumps({"spot_advisor": {}}).encode(),
    "four buckets": None,
    "a bucket out of range": None,
    "a bucket as text": None,
    "a range without a label": None,
    "empty": json.dumps({"ranges": _load(BUNDLE)["ranges"], "spot_advisor": {}}).encode(),
    "no GPU pool": None,
    "NaN saving": None,
}


def _bad(kind: str) -> bytes:
    body = BAD_FEEDS[kind]
    if body is not None:
        return body
    data = _load(FIXTURE)
    pools = data["spot_advisor"]["us-east-1"]["Linux"]
    if kind == "four buckets":
        data["ranges"] = data["ranges"][:4]
    elif kind == "a bucket out of range":
        pools["g5.xlarge"]["r"] = 7
    elif kind == "a bucket as text":
        pools["g5.xlarge"]["r"] = "2"
    elif kind == "a range without a label":
        del data["ranges"][1]["label"]
    elif kind == "no GPU pool":
        data["spot_advisor"] = {"us-east-1": {"Linux": {"m5.large": {"s": 54, "r": 1}}}}
    elif kind == "NaN saving":
        return json.dumps(data).replace('"g5.xlarge": {"s": 59', '"g5.xlarge": {"s": NaN', 1).encode()
    return json.dumps(data).encode()


@pytest.mark.parametrize("kind", sorted(BAD_FEEDS))
@responses.activate
def test_a_malformed_or_empty_feed_is_one_line_and_changes_nothing(kind: str) -> None:
    if kind == "NaN saving":
        assert '"g5.xlarge": {"s": 59' in json.dumps(_load(FIXTURE))
    _serve(FIXTURE.read_bytes())
    assert runner.invoke(app, ["pricing", "spot-advisor", "refresh"]).exit_code == 0
    kept = SpotAdvisorStore().load()
    responses.replace(responses.GET, URL, body=_bad(kind), status=200, content_type="application/json")
    r = runner.invoke(app, ["pricing", "spot-advisor", "refresh"])
    assert r.exit_code == 4, (kind, r.stdout, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert lines[0].startswith("error: aws-spot-advisor:"), r.stderr
    assert len([line for line in lines if line.startswith("error")]) == 1
    assert SpotAdvisorStore().load() == kept


@responses.activate
def test_nothing_is_stored_when_the_first_refresh_fails() -> None:
    _serve(b"{}")
    r = runner.invoke(app, ["pricing", "spot-advisor", "refresh"])
    assert r.exit_code == 4 and "'ranges'" in r.stderr
    assert SpotAdvisorStore().load() is None
    assert runner.invoke(app, ["pricing", "spot-advisor", "show"]).stdout.startswith(
        "Spot Advisor feed: bundled 2025-06-28; 682 GPU Linux pools in 27 regions"
    )


class _Scripted:
    """A loopback HTTP server answering each GET with the next (status, body, headers) of its script
    (the last repeats): urllib3's Retry runs for real (``responses`` would bypass it)."""

    def __init__(self, script: list[tuple[int, bytes, dict[str, str]]]) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.script, self.hits = script, 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_a: Any) -> None:
                pass

            def do_GET(self) -> None:
                status, body, headers = outer.script[min(outer.hits, len(outer.script) - 1)]
                outer.hits += 1
                self.send_response(status)
                for k, v in {"Content-Length": str(len(body)), **headers}.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/spot-advisor-data.json"

    def __enter__(self) -> _Scripted:
        return self

    def __exit__(self, *_a: Any) -> None:
        self.server.shutdown()


def test_http_errors_retry_through_urllib3_then_give_up_in_one_line() -> None:
    from sdk import net

    feed = FIXTURE.read_bytes()
    busy = (503, b"busy", {"Retry-After": "0"})
    with _Scripted([busy, (200, feed, {})]) as s:  # one 503, honouring Retry-After, then the feed
        assert spot_advisor.fetch(s.url, backoff=0.01)["ranges"] == _load(FIXTURE)["ranges"]
        assert s.hits == 2
    with _Scripted([busy]) as s:  # 503 every time: the policy's attempts, then one line
        with pytest.raises(SourceError, match="answered HTTP 503"):
            spot_advisor.fetch(s.url, backoff=0.01)
        assert s.hits == net.THROTTLE_ATTEMPTS
    with _Scripted([(404, b"gone", {})]) as s:  # not retried
        with pytest.raises(SourceError, match="answered HTTP 404"):
            spot_advisor.fetch(s.url, backoff=0.01)
        assert s.hits == 1
    from tests.hostile.faults import refused_port

    with pytest.raises(SourceError, match=r"cannot reach aws 127\.0\.0\.1:\d+: connection refused"):
        spot_advisor.fetch(f"http://127.0.0.1:{refused_port()}/feed.json", backoff=0.01)


@responses.activate
def test_a_body_over_the_size_limit_is_refused() -> None:
    _serve(FIXTURE.read_bytes())
    with pytest.raises(SourceError, match="over the 1,000-byte limit"):
        spot_advisor.fetch(max_bytes=1000)


@responses.activate
def test_the_request_has_timeouts() -> None:
    _serve(FIXTURE.read_bytes())
    spot_advisor.fetch(timeout=(3.0, 7.0))
    assert responses.calls[0].request.req_kwargs["timeout"] == (3.0, 7.0)


def test_a_stored_feed_older_than_the_bundle_is_not_used() -> None:
    from datetime import UTC, datetime

    from pricing import spot_risk

    old = _load(FIXTURE)
    assert spot_risk.current((old, datetime(2025, 1, 1, tzinfo=UTC))).origin == "bundled 2025-06-28"
    newer = spot_risk.current((old, datetime(2026, 1, 2, tzinfo=UTC)))
    assert newer.origin == "fetched 2026-01-02"
    assert newer.rate("us-east-1", "p4d.24xlarge") == (D("0.025") / 730, "aws-spot-advisor:<5% fetched 2026-01-02")
    assert newer.rate("us-east-1", "m5.large") is None  # filtered out on the way in


def test_a_broken_stored_feed_is_an_error_and_a_refresh_replaces_it() -> None:
    from datetime import UTC, datetime

    SpotAdvisorStore().save({"ranges": []}, datetime(2026, 1, 2, tzinfo=UTC), URL)
    r = runner.invoke(app, ["prices", "--type", "a100-40gb", "--cloud", "aws", "--market", "spot"])
    assert r.exit_code == 4 and "the stored Spot Advisor feed" in r.stderr
    with responses.RequestsMock() as mock:
        mock.add(responses.GET, URL, body=FIXTURE.read_bytes(), status=200)
        r = runner.invoke(app, ["pricing", "spot-advisor", "refresh"])
    assert r.exit_code == 0, r.stderr
    assert _spot()


def test_plans_and_prices_load_no_http_client(_isolated_db: str) -> None:
    import subprocess
    import sys

    code = (
        "import sys, json\nfrom typer.testing import CliRunner\nfrom gpuprov.cli import app\n"
        "r = CliRunner().invoke(app, ['plan', '--gpus', '8', '--type', 'a100-40gb', '-o', 'json'])\n"
        "assert r.exit_code == 0, r.output\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('requests', 'urllib3') "
        "or m == 'pricing.spot_advisor' or m == 'gpuprov.store.spot_advisor')))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert json.loads(run.stdout.strip().splitlines()[-1]) == ["gpuprov.store.spot_advisor"]
