"""gpuprov's own offer CSV: one offer a row, prices as exact decimal strings.

Columns: cloud,region,zone,instance_type,gpu,gpus_per_instance,gpu_memory_gib,vcpus,
memory_gib,market,hourly_usd,interconnect,currency,gpu_fraction,as_of. ``zone``, ``interconnect``,
``gpu_fraction`` and ``as_of`` may be empty. A size that holds a share of one GPU (Azure
NV4as_v4: 1/8 of an MI25) has ``gpus_per_instance`` 0 and its share in ``gpu_fraction``; ``as_of``
is when the offer's source row was priced (ISO 8601 with its offset). Files without the last two
columns (written before they existed) are read too. The bundled snapshot and ``gpuprov pricing
export`` use this layout.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
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
    "gpu_fraction",
    "as_of",
)
LEGACY_COLUMNS = COLUMNS[:13]


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
                "" if o.gpu_fraction is None else o.gpu_fraction,
                "" if o.as_of is None else o.as_of.isoformat(),
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
    if header is None or tuple(header) not in (COLUMNS, LEGACY_COLUMNS):
        raise ConfigError(f"{origin}:1: not a gpuprov offers CSV (expected header {','.join(COLUMNS)})")
    columns = tuple(header)
    for row in reader:
        line = reader.line_num
        try:
            yield line, _offer(row, line, origin, IDENTIFIER, MAX_FIELD, price_problem, columns)
        except ConfigError as exc:
            if report is None:
                raise
            report.skip(exc.message.split(": ", 1)[-1], line)


def _offer(
    row: list[str],
    line: int,
    origin: str,
    ident: Any,
    max_field: int,
    price_problem: Any,
    columns: tuple[str, ...] = COLUMNS,
) -> Offer:
    def bad(reason: str) -> ConfigError:
        return ConfigError(f"{origin}:{line}: {reason}")

    if len(row) != len(columns):
        raise bad("wrong number of fields")
    if any(len(v) > max_field for v in row):
        raise bad("field over 1,000 characters")
    rec = {"gpu_fraction": "", "as_of": "", **dict(zip(columns, row, strict=True))}
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
    fraction = _fraction(rec["gpu_fraction"], count, bad)
    if (count < 1 and fraction is None) or gmem < 0 or vcpus < 0 or not memory.is_finite() or memory < 0:
        raise bad("negative or zero spec")
    as_of = _as_of(rec["as_of"], bad)
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
        gpu_fraction=fraction,
        as_of=as_of,
    )


def _fraction(text: str, count: int, bad: Any) -> Decimal | None:
    """A share of one GPU: a number in (0, 1) with ``gpus_per_instance`` 0, or empty."""
    if not text:
        return None
    if len(text) > 40:  # a share such as 1/3 written to Decimal's 28 digits; nothing longer
        raise bad("gpu_fraction is longer than 40 characters")
    try:
        share = Decimal(text)
    except InvalidOperation:
        raise bad("gpu_fraction is not a number") from None
    if not share.is_finite() or not 0 < share < 1 or count != 0:
        raise bad("gpu_fraction must be in (0, 1) with gpus_per_instance 0")
    return share


def _as_of(text: str, bad: Any) -> datetime | None:
    """An aware ISO 8601 time (kept in UTC), or empty."""
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise bad("as_of is not an ISO 8601 time") from None
    if when.tzinfo is None:
        raise bad("as_of has no UTC offset")
    return when.astimezone(UTC)
