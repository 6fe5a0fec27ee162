#!/usr/bin/env python3
"""A full price refresh (AWS, GCP, Azure) against a loopback server: concurrent vs one at a time.

    python benchmarks/refresh.py [--latency 0.05] [--workers 32] [--aws-regions all|N] [--check]

A child process serves the recorded pages of ``tests/fixtures/{aws,gcp,azure}`` on
127.0.0.1 only, each answer delayed by ``--latency`` seconds: AWS ``GetProducts`` pages and
``DescribeSpotPriceHistory`` (recorded, region names substituted), the other EC2 calls from
moto's server app in the same process, GCP billing and compute pages, Azure Resource SKUs
and Retail Prices pages (extra sizes and zones are the recorded pages renamed). The real
adapters reach it through their standard endpoint overrides (``AWS_ENDPOINT_URL``,
``GPUPROV_AZURE_PRICES_URL``, GCP ``api_endpoint``, the ARM ``base_url``).

A first, concurrent refresh warms up: the server records moto's EC2 answers (replayed
afterwards, so both timed runs see the same server: a recorded answer after ``--latency``)
and the sources create their SDK clients (reused, as in a long-running process). Its time is
printed too; the two timed runs are steady state.

Bounds: the server answers at most ``--max-requests`` requests (503 after that) and exits by
itself after ``--lifetime`` seconds; each refresh has a timeout; the child is stopped at the end.
Prints pages/s and wall time for both modes, the speed-up (target ≥ 8×) and peak RSS.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
PROJECT = "gpuprov-bench"
SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"
AWS_REGIONS = [
    "us-east-1",
    "us-east-2",
    "us-west-1",
    "us-west-2",
    "ca-central-1",
    "eu-west-1",
    "eu-west-2",
    "eu-central-1",
    "eu-north-1",
    "ap-northeast-1",
    "ap-southeast-1",
    "ap-southeast-2",
    "ap-south-1",
    "sa-east-1",
    "ap-northeast-2",
    "eu-west-3",
]
GCP_ZONES = {
    "us-central1-a": [
        "us-central1-a",
        "us-central1-b",
        "us-central1-c",
        "us-central1-f",
        "us-east1-b",
        "us-east1-c",
        "us-east1-d",
        "us-west1-a",
        "us-west1-b",
        "us-west1-c",
    ],
    "us-east4-a": ["us-east4-a", "us-east4-b", "us-east4-c"],
    "europe-west4-a": ["europe-west4-a", "europe-west4-b", "europe-west4-c"],
}
AZURE_SIZES = {  # extra size -> the recorded size whose pages it reuses (renamed)
    "Standard_NC8as_T4_v3": "Standard_NC4as_T4_v3",
    "Standard_NC16as_T4_v3": "Standard_NC4as_T4_v3",
    "Standard_NC64as_T4_v3": "Standard_NC4as_T4_v3",
    "Standard_NC48ads_A100_v4": "Standard_NC24ads_A100_v4",
    "Standard_NC96ads_A100_v4": "Standard_NC24ads_A100_v4",
    "Standard_ND96amsr_A100_v4": "Standard_NC24ads_A100_v4",
    "Standard_NC40ads_H100_v5": "Standard_ND96isr_H100_v5",
    "Standard_NC80adis_H100_v5": "Standard_ND96isr_H100_v5",
}


# -- the loopback server (child process) ---------------------------------------------------
def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _short(size: str) -> str:
    return size.removeprefix("Standard_").replace("_", " ")


class Pages:
    """Recorded pages, renamed for more regions, zones and sizes."""

    def __init__(self, base: str) -> None:
        self.base = base
        aws, gcp, azure = FIXTURES / "aws", FIXTURES / "gcp", FIXTURES / "azure"
        self.products = [_read(aws / f"get-products-us-east-1-page{i}.json") for i in (1, 2)]
        self.spot = _read(aws / "describe-spot-price-history-us-east-1.xml")
        self.skus = [_read(gcp / f"skus-page{i}.json") for i in (1, 2, 3)]
        self.sku_tokens = [json.loads(p).get("nextPageToken") for p in self.skus]
        self.accels = json.loads(_read(gcp / "accelerator-types-aggregated.json"))
        self.machines = {z: sorted(gcp.glob(f"machine-types-{z}-page*.json")) for z in GCP_ZONES}
        self.arm = [_read(azure / f"resource-skus-page{i}.json") for i in (1, 2)]
        self.azure = azure

    @functools.cache  # noqa: B019 - one Pages per server process
    def product_page(self, region: str, token: str | None) -> bytes:
        text = self.products[1 if token else 0]
        return text.replace('\\"regionCode\\":\\"us-east-1\\"', f'\\"regionCode\\":\\"{region}\\"').encode()

    @functools.cache  # noqa: B019 - one Pages per server process
    def spot_page(self, region: str) -> bytes:
        return re.sub(
            r"us-east-1(-atl-2)?([a-f])<", lambda m: f"{region}{m.group(1) or ''}{m.group(2)}<", self.spot
        ).encode()

    @functools.cache  # noqa: B019 - one Pages per server process
    def sku_page(self, token: str | None) -> bytes:
        index = 0 if not token else self.sku_tokens.index(token) + 1
        return self.skus[index].encode()

    @functools.cache  # noqa: B019 - one Pages per server process
    def accelerator_page(self) -> bytes:
        items = {}
        for template, zones in GCP_ZONES.items():
            listed = self.accels["items"][f"zones/{template}"]
            for zone in zones:
                items[f"zones/{zone}"] = json.loads(json.dumps(listed).replace(template, zone))
        return json.dumps(dict(self.accels, items=items)).encode()

    @functools.cache  # noqa: B019 - one Pages per server process
    def machine_page(self, zone: str, token: str | None) -> bytes:
        template = next(t for t, zones in GCP_ZONES.items() if zone in zones)
        pages = self.machines[template]
        return _read(pages[1 if token else 0]).replace(template, zone).encode()

    @functools.cache  # noqa: B019 - one Pages per server process
    def arm_page(self, skiptoken: str | None) -> bytes:
        if skiptoken:
            return self.arm[1].encode()
        page = json.loads(self.arm[0])
        extra = []
        for size, template in AZURE_SIZES.items():
            sku = next(v for v in page["value"] if v["name"] == template)
            extra.append(json.loads(json.dumps(sku).replace(template, size).replace(_short(template), _short(size))))
        page["value"] += extra
        page["nextLink"] = page["nextLink"].replace("https://management.azure.com", self.base)
        return json.dumps(page).encode()

    @functools.cache  # noqa: B019 - one Pages per server process
    def retail_page(self, query_items: tuple[tuple[str, str], ...]) -> bytes:
        query = dict(query_items)
        text = query.get("$filter", "")
        size = re.search(r"armSkuName eq '([^']+)'", text)
        kind = re.search(r"priceType eq '([^']+)'", text)
        name = size.group(1) if size else ""
        template = AZURE_SIZES.get(name, name)
        skip = int(query.get("$skip", "0"))
        pages = sorted(self.azure.glob(f"retail-{template}-{kind.group(1) if kind else ''}-page*.json"))
        index = 0 if not skip else 1
        if index >= len(pages):
            return json.dumps({"Items": [], "NextPageLink": None, "Count": 0}).encode()
        body = _read(pages[index]).replace("https://prices.azure.com:443", self.base)
        return body.replace(template, name).replace(_short(template), _short(name)).encode()


class LoopbackApp:
    """WSGI: recorded pages, moto for the rest of EC2; every answer delayed, the total bounded."""

    def __init__(self, pages: Pages, latency: float, max_requests: int) -> None:
        from moto.server import DomainDispatcherApplication, create_backend_app

        self.moto = DomainDispatcherApplication(create_backend_app)
        self.pages, self.latency, self.max_requests = pages, latency, max_requests
        self.count = 0
        self.lock = threading.Lock()
        self.recorded: dict[tuple[str, bytes], tuple[str, list[tuple[str, str]], bytes]] = {}

    def __call__(self, environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
        path, query = environ.get("PATH_INFO", ""), parse_qs(environ.get("QUERY_STRING", ""))
        if path == "/__stats":
            return self._send(start, json.dumps({"requests": self.count}).encode())
        with self.lock:
            self.count += 1
            over = self.count > self.max_requests
        if over:
            return self._send(start, b'{"error": "request budget exhausted"}', "503 Service Unavailable")
        time.sleep(self.latency)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if target.endswith("GetProducts"):
            request = json.loads(body)
            fields = {f["Field"]: f["Value"] for f in request["Filters"]}
            return self._send(
                start,
                self.pages.product_page(fields["regionCode"], request.get("NextToken")),
                ctype="application/x-amz-json-1.1",
            )
        if b"Action=DescribeSpotPriceHistory" in body:
            region = re.search(r"Credential=[^/]+/\d+/([a-z0-9-]+)/", environ.get("HTTP_AUTHORIZATION", ""))
            return self._send(start, self.pages.spot_page(region.group(1) if region else "us-east-1"), ctype="text/xml")
        if path.startswith("/v1/services/"):
            return self._send(start, self.pages.sku_page(query.get("pageToken", [None])[0]))
        if path.endswith("/aggregated/acceleratorTypes"):
            return self._send(start, self.pages.accelerator_page())
        if path.endswith("/machineTypes"):
            zone = path.split("/zones/")[1].split("/")[0]
            return self._send(start, self.pages.machine_page(zone, query.get("pageToken", [None])[0]))
        if path.endswith("/providers/Microsoft.Compute/skus"):
            return self._send(start, self.pages.arm_page(query.get("$skiptoken", [None])[0]))
        if path.startswith("/api/retail/prices"):
            return self._send(start, self.pages.retail_page(tuple(sorted((k, v[0]) for k, v in query.items()))))
        return self._moto(environ, start, body)

    def _moto(self, environ: dict[str, Any], start: Callable[..., Any], body: bytes) -> Iterable[bytes]:
        """moto's answer, recorded on first use: later runs replay it at no server cost."""
        auth = environ.get("HTTP_AUTHORIZATION", "")
        key = (re.sub(r"^.*?Credential=[^/]+/\d+/", "", auth).split("/")[0], body)
        if key not in self.recorded:
            captured: dict[str, Any] = {}

            def capture(status: str, headers: list[tuple[str, str]], *_exc: Any) -> Callable[[bytes], None]:
                captured.update(status=status, headers=headers)
                return lambda _data: None

            chunks = b"".join(self.moto(environ, capture))
            self.recorded[key] = (captured["status"], captured["headers"], chunks)
        status, headers, chunks = self.recorded[key]
        start(status, headers)
        return [chunks]

    @staticmethod
    def _send(
        start: Callable[..., Any], body: bytes, status: str = "200 OK", ctype: str = "application/json"
    ) -> list[bytes]:
        start(status, [("Content-Type", ctype), ("Content-Length", str(len(body)))])
        return [body]


def serve(latency: float, max_requests: int, lifetime: float) -> None:
    import logging

    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)

    server = make_server("127.0.0.1", 0, lambda e, s: app(e, s), threaded=True)
    port = server.server_port
    app = LoopbackApp(Pages(f"http://127.0.0.1:{port}"), latency, max_requests)
    threading.Timer(lifetime, lambda: os._exit(3)).start()  # stop by itself, whatever happens
    print(port, flush=True)
    server.serve_forever()


# -- the benchmark (parent process) ----------------------------------------------------------
def sources(base: str, regions: list[str] | None) -> list[Any]:
    from google.auth.credentials import AnonymousCredentials

    from pricing.aws import AwsPriceSource
    from pricing.azure import AzurePriceSource
    from pricing.gcp import GcpPriceSource

    class FakeCredential:
        def get_token(self, *_scopes: str, **_kw: Any) -> Any:
            from azure.core.credentials import AccessToken

            return AccessToken("bench-token", int(time.time()) + 3600)

    return [
        AwsPriceSource(regions),
        GcpPriceSource(PROJECT, AnonymousCredentials(), billing_endpoint=base, compute_endpoint=base),
        AzurePriceSource(SUBSCRIPTION, FakeCredential(), arm_endpoint=base),
    ]


def run_once(price_sources: list[Any], workers: int, db: str) -> tuple[float, Any]:
    from gpuprov.store.catalog import Catalog
    from pricing.refresh import refresh

    catalog = Catalog(f"sqlite:///{db}")
    catalog.ensure_schema()
    start = time.perf_counter()
    result = refresh(price_sources, catalog, max_workers=workers, timeout=120)
    return time.perf_counter() - start, result


def rss_mib(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # KiB on Linux


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.05, help="seconds added to every answer")
    parser.add_argument("--workers", type=int, default=32, help="request pool size of the concurrent run")
    parser.add_argument(
        "--aws-regions",
        default="all",
        help="'all' (every region describe_regions lists, as a real refresh does) "
        f"or a count of the first of {len(AWS_REGIONS)} fixed regions",
    )
    parser.add_argument("--max-requests", type=int, default=2000, help="server-side request budget")
    parser.add_argument("--lifetime", type=float, default=300, help="the server exits after this many seconds")
    parser.add_argument("--check", action="store_true", help="exit 1 when the speed-up is below 8x")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.latency, args.max_requests, args.lifetime)
        return 0
    count = args.aws_regions
    if count != "all" and not (count.isdigit() and 1 <= int(count) <= len(AWS_REGIONS)):
        parser.error(f"--aws-regions: 'all' or 1..{len(AWS_REGIONS)}")

    child = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--serve",
            "--latency",
            str(args.latency),
            "--max-requests",
            str(args.max_requests),
            "--lifetime",
            str(args.lifetime),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
    )

    def give_up() -> None:  # the whole benchmark stops by itself, too
        child.kill()
        os._exit(3)

    watchdog = threading.Timer(args.lifetime + 30, give_up)
    watchdog.daemon = True
    watchdog.start()
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        base = f"http://127.0.0.1:{port}"
        os.environ.update(
            {
                "AWS_ENDPOINT_URL": base,
                "AWS_ACCESS_KEY_ID": "bench",
                "AWS_SECRET_ACCESS_KEY": "bench",
                "AWS_DEFAULT_REGION": "us-east-1",
                "GPUPROV_AZURE_PRICES_URL": f"{base}/api/retail/prices",
            }
        )
        for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
            os.environ.pop(var, None)
        import importlib

        for module in ("boto3", "google.cloud.billing_v1", "google.cloud.compute_v1", "azure.mgmt.compute"):
            importlib.import_module(module)  # imports are not what is measured

        regions = None if args.aws_regions == "all" else AWS_REGIONS[: int(args.aws_regions)]
        rss_before = rss_mib(resource.RUSAGE_SELF)
        with tempfile.TemporaryDirectory() as tmp:
            price_sources = sources(base, regions)
            warm_s, warm = run_once(price_sources, args.workers, f"{tmp}/warm.db")
            seq_s, seq = run_once(price_sources, 1, f"{tmp}/seq.db")
            rss_seq = rss_mib(resource.RUSAGE_SELF)
            par_s, par = run_once(price_sources, args.workers, f"{tmp}/par.db")
        import urllib.request

        with urllib.request.urlopen(f"{base}/__stats", timeout=10) as resp:
            served = json.loads(resp.read())["requests"]
    finally:
        child.terminate()
        child.wait(timeout=10)
        watchdog.cancel()
    for name, result in (("warm-up", warm), ("one at a time", seq), ("concurrent", par)):
        for outcome in result.outcomes:
            if not outcome.ok:
                print(f"{name}: {outcome.cloud.value} FAILED: {outcome.error.message}")
    speedup = seq_s / par_s
    aws_regions = "all listed" if regions is None else str(len(regions))
    print(
        f"refresh benchmark: loopback {base}, +{args.latency * 1000:.0f} ms per answer; "
        f"AWS {aws_regions} regions, GCP {sum(map(len, GCP_ZONES.values()))} zones, "
        f"Azure {5 + len(AZURE_SIZES)} GPU sizes"
    )
    print(
        f"  warm-up, concurrent (records moto's EC2 answers; creates the SDK clients): "
        f"{warm.requests} requests in {warm_s:.2f} s"
    )
    print(
        f"  one at a time : {seq.requests:4d} requests in {seq_s:6.2f} s = {seq.requests / seq_s:7.1f} pages/s; "
        + ", ".join(f"{o.cloud.value} {o.stored}" for o in seq.outcomes)
        + " offers"
    )
    print(
        f"  concurrent({args.workers:2d}): {par.requests:4d} requests in {par_s:6.2f} s = "
        f"{par.requests / par_s:7.1f} pages/s; "
        + ", ".join(f"{o.cloud.value} {o.stored}" for o in par.outcomes)
        + " offers"
    )
    print(f"  speed-up: {speedup:.1f}x (target >= 8x)")
    print(
        f"  peak RSS of this process: {rss_before:.0f} MiB after imports, {rss_seq:.0f} MiB after the one-at-a-time "
        f"run, {rss_mib(resource.RUSAGE_SELF):.0f} MiB at the end; loopback server (moto) "
        f"{rss_mib(resource.RUSAGE_CHILDREN):.0f} MiB"
    )
    print(f"  requests served by the loopback server: {served} (budget {args.max_requests})")
    ok = seq.ok and par.ok and seq.requests == par.requests
    return 0 if ok and (speedup >= 8 or not args.check) else 1


if __name__ == "__main__":
    sys.exit(main())
