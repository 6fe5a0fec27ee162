"""The GCP committed-use discounts a project holds, entered per machine type.

``compute_v1.RegionCommitmentsClient().aggregated_list(project=…)`` (REST; google-cloud-compute is
imported lazily). Kept: status ``ACTIVE``, plan ``TWELVE_MONTH`` (1y) or ``THIRTY_SIX_MONTH``
(3y), and each ``ACCELERATOR`` resource (``acceleratorType`` + ``amount`` GPUs). gpuprov records
a GCP commitment per machine type (commitments/records.py), so an accelerator commitment maps
to the catalog's machine type in that region carrying that GPU whose GPUs per instance divide
the amount, the largest such (8 × A100 → a2-highgpu-8g rather than 8 × a2-highgpu-1g): count
= amount / GPUs per machine, hourly = the catalog's ``reserved_1y``/``reserved_3y`` price of
that machine type there (its vCPU and memory commitment come with it: the machine price
includes them). What cannot be mapped (a GPU the catalog does not carry there, an amount no
machine divides, no reserved price) is a note, never a guess. VCPU, MEMORY and LOCAL_SSD
resources alone (a commitment without accelerators) are not entered: gpuprov plans GPU
machines, whose price the catalog gives per machine.

Ids: ``gcp:committed_use:<region>/<name>`` (``/<acceleratorType>`` added where one commitment
holds several accelerator types).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from commitments.records import Commitment, Kind, Known, from_cloud
from gpuprov.errors import CredentialsError, GpuprovError, ProvisioningError, TransientError, UnknownGpuError
from gpuprov.models import Offer
from sdk import gcp as sdk_gcp

PLANS = {"TWELVE_MONTH": ("1y", "reserved_1y"), "THIRTY_SIX_MONTH": ("3y", "reserved_3y")}


def _sdk() -> Any:
    """google.cloud.compute_v1 (sdk/gcp.py)."""
    return sdk_gcp.load("GCP discovery").compute


def _tail(url_or_name: str) -> str:
    return url_or_name.rstrip("/").rsplit("/", 1)[-1]


def machine_for(
    offers: Iterable[Offer], region: str, gpu: str, amount: int, market: str
) -> tuple[str, int, Decimal] | str:
    """(machine type, count, hourly) for ``amount`` GPUs of ``gpu`` in ``region`` at the catalog's
    reserved price for ``market``; or why none fits."""
    prices: dict[tuple[str, int], Decimal] = {}
    for o in offers:
        if (o.cloud.value, o.region, o.gpu, o.market.value) != ("gcp", region, gpu, market):
            continue
        if o.gpu_fraction is not None or o.gpus_per_instance < 1:
            continue
        key = (o.instance_type, o.gpus_per_instance)
        prices[key] = min(prices.get(key, o.hourly_usd), o.hourly_usd)
    if not prices:
        return f"the catalog has no {market} price of a {gpu} machine type in {region}"
    fits = [(gpi, itype) for (itype, gpi) in prices if amount % gpi == 0]
    if not fits:
        sizes = ", ".join(str(g) for g in sorted({g for _t, g in prices}))
        return f"no {gpu} machine type in {region} divides {amount} GPUs (GPUs per machine: {sizes})"
    gpi, itype = max(fits, key=lambda f: (f[0], f[1]))
    return itype, amount // gpi, prices[(itype, gpi)]


def _throttled(exc: BaseException) -> bool:
    from google.api_core import exceptions as gexc

    return isinstance(exc, gexc.TooManyRequests | gexc.InternalServerError | gexc.ServiceUnavailable)


def _translate(exc: BaseException) -> Exception:
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as aexc

    if sdk_gcp.unreachable(exc) is not None:
        return sdk_gcp.translated(exc, "GCP regionCommitments.aggregatedList")
    if isinstance(exc, aexc.GoogleAuthError):
        return CredentialsError(
            f"GCP credentials: {type(exc).__name__}", hint="gcloud auth application-default login, or a service account"
        )
    if isinstance(exc, (gexc.Unauthorized, gexc.Forbidden)):
        return CredentialsError(
            f"GCP refused regionCommitments.aggregatedList: HTTP {int(exc.code or 0)}",
            hint="the identity needs compute.commitments.list on the project",
        )
    if isinstance(exc, gexc.GoogleAPICallError):
        code = int(getattr(exc, "code", 0) or 0)
        if code in (429, 500, 502, 503, 504):
            return TransientError(f"GCP regionCommitments.aggregatedList: HTTP {code}")
        return ProvisioningError(f"GCP regionCommitments.aggregatedList failed: HTTP {code}")
    return TransientError(f"GCP regionCommitments.aggregatedList: {type(exc).__name__}")


def discover(
    project: str,
    offers: Sequence[Offer] = (),
    now: datetime | None = None,
    credentials: Any = None,
    known: Known | None = None,
    endpoint: str | None = None,
) -> tuple[list[Commitment], list[str]]:
    """The project's active accelerator commitments, as records per machine type, and notes.
    (``now`` is unused: status ACTIVE is the cloud's own word for it.) ``endpoint``: the Compute
    API's address (config ``gcp.endpoint``), else Google's."""
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as aexc

    from pricing.gpus import canonical

    compute_v1 = _sdk()
    out: list[Commitment] = []
    notes: list[str] = []
    try:
        client = compute_v1.RegionCommitmentsClient(
            credentials=credentials, transport="rest", client_options=sdk_gcp.options(endpoint)
        )
        request = compute_v1.AggregatedListRegionCommitmentsRequest(project=project)
        pages = client.aggregated_list(request=request, retry=sdk_gcp.retry(_throttled), timeout=sdk_gcp.timeout())
        scoped = [(key, list(s.commitments)) for key, s in pages]
    except (gexc.GoogleAPICallError, aexc.GoogleAuthError, gexc.RetryError) as exc:
        raise _translate(exc) from None
    except GpuprovError:
        raise
    except Exception as exc:  # the network, or an answer the SDK could not read: one line
        raise sdk_gcp.translated(exc, "GCP regionCommitments.aggregatedList") from None
    for _key, commitments in scoped:
        for c in commitments:
            region = _tail(c.region or _key)
            label = f"gcp:committed_use:{region}/{c.name}"[:160]
            if c.status != "ACTIVE":
                continue
            if c.plan not in PLANS:
                notes.append(f"gcp: skipped {label}: plan {c.plan[:20]!r} is neither TWELVE_MONTH nor THIRTY_SIX_MONTH")
                continue
            term, market = PLANS[c.plan]
            gpus = [r for r in c.resources if r.type_ == "ACCELERATOR"]
            if not gpus:
                notes.append(f"gcp: skipped {label}: no accelerators (vCPU/memory commitments are not entered)")
                continue
            several = len({r.accelerator_type for r in gpus}) > 1
            for r in gpus:
                rid = f"gcp:committed_use:{region}/{c.name}" + (f"/{_tail(r.accelerator_type)}" if several else "")
                accel = _tail(r.accelerator_type)
                try:
                    gpu = canonical(accel)
                except UnknownGpuError:
                    notes.append(f"gcp: skipped {rid[:160]}: unknown accelerator type {accel[:40]!r}")
                    continue
                if r.amount < 1:
                    notes.append(f"gcp: skipped {rid[:160]}: amount {r.amount} of {accel[:40]}")
                    continue
                found = machine_for(offers, region, gpu, int(r.amount), market)
                if isinstance(found, str):
                    notes.append(f"gcp: skipped {rid[:160]}: {r.amount} × {accel[:40]}: {found}")
                    continue
                itype, count, hourly = found
                raw = {
                    "id": rid,
                    "cloud": "gcp",
                    "kind": Kind.COMMITTED_USE.value,
                    "instance_type": itype,
                    "region": region,
                    "count": count,
                    "hourly_usd": format(hourly, "f"),
                    "term": term,
                    "starts": c.start_timestamp or None,
                    "ends": c.end_timestamp or None,
                }
                checked = from_cloud(raw, "gcp", known)
                if isinstance(checked, str):
                    notes.append(f"gcp: skipped {rid[:160]}: {checked}")
                else:
                    out.append(checked)
    return out, notes
