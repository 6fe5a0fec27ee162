"""gpuprov's own offer CSV: one offer a row, prices as exact decimal strings.

Columns: cloud,region,zone,instance_type,gpu,gpus_per_instance,gpu_memory_gib,vcpus,
memory_gib,market,hourly_usd,interconnect,currency. ``zone`` and ``interconnect`` may be empty.
The bundled snapshot and ``gpuprov pricing export`` use this layout.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from typing import IO, Any

from gpuprov.errors import ConfigError, UnknownGpuError
from gpuprov.models import Cloud, Market, Offer
from pricing import gpus

COLUMNS = (
    "cloud",
    "region",
    "zone",
    "instance_type",
    "gpu",
    "gpus_per_instance",
    "gpu_memory_gib",
    "vcpus",
    "memory_gib",
    "market",
    "hourly_usd",
    "interconnect",
    "currency",
)


def write_offers(offers: Iterable[Offer], out: IO[str]) -> int:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    n = 0
    for o in offers:
        writer.writerow(
            [
                o.cloud.value,
                o.region,
                o.zone or "",
                o.instance_type,
                o.gpu,
                o.gpus_per_instance,
                o.gpu_memory_gib,
                o.vcpus,
                o.memory_gib,
                o.market.value,
                o.hourly_usd,
                o.interconnect or "",
                o.currency,
            ]
        )
        n += 1
    return n


def read_offers(lines: Iterable[str], origin: str, report: Any = None) -> Iterator[Offer]:
    """Offers of a gpuprov CSV. With a ``report`` (anything with ``skip(reason, line)``), a bad row
    is skipped and counted with its line number; without one it is an error naming the line."""
    return (o for _, o in read_offer_lines(lines, origin, report))


def read_offer_lines(lines: Iterable[str], origin: str, report: Any = None) -> Iterator[tuple[int, Offer]]:
    """``read_offers`` with the line each offer comes from, one row read at a time."""
    from pricing.validate import IDENTIFIER, MAX_FIELD, price_problem

    reader = csv.reader(lines)
    header = next(reader, None)
    if header is None or tuple(header) != COLUMNS:
        raise ConfigError(f"{origin}:1: not a gpuprov offers CSV (expected header {','.join(COLUMNS)})")
    for row in reader:
        line = reader.line_num
        try:
            yield line, _offer(row, line, origin, IDENTIFIER, MAX_FIELD, price_problem)
        except ConfigError as exc:
            if report is None:
                raise
            report.skip(exc.message.split(": ", 1)[-1], line)


def _offer(row: list[str], line: int, origin: str, ident: Any, max_field: int, price_problem: Any) -> Offer:
    def bad(reason: str) -> ConfigError:
        return ConfigError(f"{origin}:{line}: {reason}")

    if len(row) != len(COLUMNS):
        raise bad("wrong number of fields")
    if any(len(v) > max_field for v in row):
        raise bad("field over 1,000 characters")
    rec = dict(zip(COLUMNS, row, strict=True))
    try:
        cloud = Cloud(rec["cloud"])
        market = Market(rec["market"])
    except ValueError:
        raise bad("unknown cloud or market") from None
    for key in ("region", "instance_type", "gpu") + (("zone",) if rec["zone"] else ()):
        if not ident.fullmatch(rec[key]):
            raise bad("identifier outside [A-Za-z0-9._:/-]")
    from gpuprov import numbers

    try:
        price = numbers.parse(rec["hourly_usd"], "price row")
        memory = numbers.parse(rec["memory_gib"], "price row")
        count, gmem, vcpus = (int(rec["gpus_per_instance"]), int(rec["gpu_memory_gib"]), int(rec["vcpus"]))
    except ValueError:  # numbers.NumberError is one
        raise bad("non-numeric number field") from None
    problem = price_problem(price, rec["currency"] or "USD")
    if problem is not None:
        raise bad(problem)
    if count < 1 or gmem < 0 or vcpus < 0 or not memory.is_finite() or memory < 0:
        raise bad("negative or zero spec")
    try:
        gpu = gpus.canonical(rec["gpu"])
    except UnknownGpuError:
        raise bad("unknown GPU") from None
    return Offer(
        cloud=cloud,
        region=rec["region"],
        zone=rec["zone"] or None,
        instance_type=rec["instance_type"],
        gpu=gpu,
        gpus_per_instance=count,
        gpu_memory_gib=gmem,
        vcpus=vcpus,
        memory_gib=memory,
        market=market,
        hourly_usd=price,
        interconnect=rec["interconnect"] or None,
        currency=rec["currency"] or "USD",
    )
