"""gpuprov's own offer CSV: one offer a row, prices as exact decimal strings.

Columns: cloud,region,zone,instance_type,gpu,gpus_per_instance,gpu_memory_gib,vcpus,
memory_gib,market,hourly_usd,interconnect,currency. ``zone`` and ``interconnect`` may be empty.
The bundled snapshot and ``gpuprov pricing export`` use this layout.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from decimal import Decimal, InvalidOperation
from typing import IO

from gpuprov.errors import ConfigError
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


def read_offers(lines: Iterable[str], origin: str) -> Iterator[Offer]:
    reader = csv.reader(lines)
    header = next(reader, None)
    if header is None or tuple(header) != COLUMNS:
        raise ConfigError(f"{origin}:1: not a gpuprov offers CSV (expected header {','.join(COLUMNS)})")
    for row in reader:
        line = reader.line_num
        if len(row) != len(COLUMNS):
            raise ConfigError(f"{origin}:{line}: expected {len(COLUMNS)} fields, found {len(row)}")
        rec = dict(zip(COLUMNS, row, strict=True))
        try:
            cloud = Cloud(rec["cloud"])
            market = Market(rec["market"])
        except ValueError as exc:
            raise ConfigError(f"{origin}:{line}: {exc}") from None
        try:
            price = Decimal(rec["hourly_usd"])
            memory = Decimal(rec["memory_gib"])
            count, gmem, vcpus = (int(rec["gpus_per_instance"]), int(rec["gpu_memory_gib"]), int(rec["vcpus"]))
        except (InvalidOperation, ValueError):
            raise ConfigError(f"{origin}:{line}: a number field is not a number") from None
        if not price.is_finite() or price <= 0:
            raise ConfigError(f"{origin}:{line}: hourly_usd must be a positive number, got {rec['hourly_usd']!r}")
        if count < 1:
            raise ConfigError(f"{origin}:{line}: gpus_per_instance must be at least 1")
        yield Offer(
            cloud=cloud,
            region=rec["region"],
            zone=rec["zone"] or None,
            instance_type=rec["instance_type"],
            gpu=gpus.canonical(rec["gpu"]),
            gpus_per_instance=count,
            gpu_memory_gib=gmem,
            vcpus=vcpus,
            memory_gib=memory,
            market=market,
            hourly_usd=price,
            interconnect=rec["interconnect"] or None,
            currency=rec["currency"] or "USD",
        )
