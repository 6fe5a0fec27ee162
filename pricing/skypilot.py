"""Read price catalogs in SkyPilot's v8 ``vms.csv`` layouts into offers.

Three layouts (the header row tells them apart):

* AWS: ``InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,
  AvailabilityZone,Arch``
  - per availability-zone id; an empty SpotPrice is "no quote". A SpotPrice equal to Price
    (SkyPilot's stand-in where it had no quote) is kept as a spot offer at that price: it is
    never cheaper than on demand, so it cannot mislead the optimizer, and imports stay exact.
* GCP: ``InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice``
  - host VM rows and accelerator rows (InstanceType empty) are separate; an offer is a
    host + its GPUs in one zone, priced as their sum.
* Azure: ``InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,Generation``
  - per region; fractional GPU counts (0.5 of an A10) are skipped.

Rows that cannot become an offer are counted by reason in ``ParseReport`` rather than
dropped silently. A row that is malformed (a price that is not a number) raises
``ConfigError`` naming the line.
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from gpuprov.errors import ConfigError, UnknownGpuError
from gpuprov.models import Cloud, Market, Offer
from pricing import gpus
from pricing import interconnect as fabric

AWS_HEADER = (
    "InstanceType",
    "AcceleratorName",
    "AcceleratorCount",
    "vCPUs",
    "MemoryGiB",
    "GpuInfo",
    "Price",
    "SpotPrice",
    "Region",
    "AvailabilityZone",
)
GCP_HEADER = (
    "InstanceType",
    "vCPUs",
    "MemoryGiB",
    "AcceleratorName",
    "AcceleratorCount",
    "GpuInfo",
    "Region",
    "AvailabilityZone",
    "Price",
    "SpotPrice",
)
AZURE_HEADER = (
    "InstanceType",
    "AcceleratorName",
    "AcceleratorCount",
    "vCPUs",
    "MemoryGiB",
    "GpuInfo",
    "Price",
    "SpotPrice",
    "Region",
)


MAX_REASONS = 50  # distinct skip reasons kept by name; the rest are counted under OTHER_REASONS
MAX_LINES_PER_REASON = 20
OTHER_REASONS = "other reasons"


@dataclass
class ParseReport:
    """Skipped rows counted by reason, with the first line numbers of each: bounded in memory
    however many rows a file has (reasons past ``MAX_REASONS`` are pooled as "other reasons")."""

    offers: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    lines: dict[str, list[int]] = field(default_factory=dict)  # the first line numbers per reason
    line_count: Counter[str] = field(default_factory=Counter)  # lines per reason, listed or not
    _last: dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str, line: int | None = None, n: int = 1) -> None:
        if reason not in self.skipped and len(self.skipped) >= MAX_REASONS:
            reason = OTHER_REASONS
        self.skipped[reason] += n
        if line is not None and self._last.get(reason) != line:  # a row's two offers name its line once
            self._last[reason] = line
            self.line_count[reason] += 1
            seen = self.lines.setdefault(reason, [])
            if len(seen) < MAX_LINES_PER_REASON:
                seen.append(line)

    def summary(self) -> list[str]:
        """One line per reason: ``12 rows: zero price (lines 4, 9, … and 10 more)``."""
        out = []
        for reason, n in sorted(self.skipped.items()):
            seen = self.lines.get(reason, [])
            unlisted = self.line_count[reason] - len(seen)
            more = f", … and {unlisted:,} more" if unlisted > 0 else ""
            at = f" (lines {', '.join(map(str, seen))}{more})" if seen else ""
            out.append(f"{n:,} rows: {reason}{at}")
        return out


@dataclass(frozen=True)
class _Row:
    line: int
    values: dict[str, str]

    def get(self, key: str) -> str:
        return (self.values.get(key) or "").strip()

    def money(self, key: str, origin: str) -> Decimal | None:
        text = self.get(key)
        if not text:
            return None
        try:
            value = Decimal(text)
        except InvalidOperation:
            raise ConfigError(f"{origin}:{self.line}: {key} {text!r} is not a number") from None
        if not value.is_finite():
            raise ConfigError(f"{origin}:{self.line}: {key} {text!r} is not a finite number")
        return value

    def quantity(self, key: str, origin: str) -> Decimal:
        """A plain number with no trailing zeros and no exponent (``30.0`` -> ``30``)."""
        value = self.number(key, origin)
        return value.quantize(Decimal(1)) if value == value.to_integral_value() else value.normalize()

    def number(self, key: str, origin: str) -> Decimal:
        text = self.get(key)
        try:
            value = Decimal(text)
        except InvalidOperation:
            raise ConfigError(f"{origin}:{self.line}: {key} {text!r} is not a number") from None
        if not value.is_finite():
            raise ConfigError(f"{origin}:{self.line}: {key} {text!r} is not a finite number")
        return value


NUMBER_COLUMNS = ("Price", "SpotPrice", "vCPUs", "MemoryGiB", "AcceleratorCount", "GpuInfo")
ID_COLUMNS = ("InstanceType", "Region", "AvailabilityZone", "AcceleratorName")


def read_rows(
    lines: Iterable[str], origin: str, report: ParseReport | None = None
) -> tuple[tuple[str, ...], list[_Row]]:
    """The rows of a vms.csv, as a list (see ``iter_rows``)."""
    header, rows = iter_rows(lines, origin, report)
    return header, list(rows)


def iter_rows(
    lines: Iterable[str], origin: str, report: ParseReport | None = None
) -> tuple[tuple[str, ...], Iterator[_Row]]:
    """The header of a vms.csv and its rows, read one at a time as the iterator is consumed.
    With a ``report``, a row with a field over 1,000 characters, an identifier outside
    ``[A-Za-z0-9._:/-]`` or a number field that is not a finite number ≥ 0 is skipped and counted
    with its line number; without one such a row is an error."""
    reader = csv.DictReader(lines)
    header = tuple(reader.fieldnames or ())

    def rows() -> Iterator[_Row]:
        for values in reader:
            if None in values:
                if report is None:
                    raise ConfigError(f"{origin}:{reader.line_num}: more fields than the header has")
                report.skip("more fields than the header has", reader.line_num)
                continue
            problem = row_problem(values) if report is not None else None
            if problem is not None and report is not None:
                report.skip(problem, reader.line_num)
                continue
            yield _Row(reader.line_num, values)

    return header, rows()


def row_problem(values: dict[str, str]) -> str | None:
    from pricing.validate import IDENTIFIER, MAX_FIELD

    for value in values.values():
        if value is not None and len(value) > MAX_FIELD:
            return "field over 1,000 characters"
    for key in ID_COLUMNS:
        value = (values.get(key) or "").strip()
        if value and not IDENTIFIER.fullmatch(value):
            return "identifier outside [A-Za-z0-9._:/-]"
    for key in ("Price", "SpotPrice", "vCPUs", "MemoryGiB", "AcceleratorCount"):
        text = (values.get(key) or "").strip()
        if not text:
            continue
        try:
            number = Decimal(text)
        except InvalidOperation:
            return "non-numeric number field"
        if not number.is_finite():
            return "non-finite number"
        if number < 0:
            return "negative number"
    return None


def detect_cloud(header: tuple[str, ...], origin: str) -> Cloud:
    cols = set(header)
    if set(AWS_HEADER) <= cols:
        return Cloud.AWS
    if set(GCP_HEADER) <= cols:
        return Cloud.GCP
    if set(AZURE_HEADER) <= cols and "AvailabilityZone" not in cols:
        return Cloud.AZURE
    raise ConfigError(f"{origin}:1: not a SkyPilot v8 vms.csv header: {','.join(header)}")


def _gpu(row: _Row, report: ParseReport) -> tuple[str, int] | None:
    name = row.get("AcceleratorName")
    if not name:
        report.skip("no accelerator")
        return None
    try:
        canonical = gpus.canonical(name)
    except UnknownGpuError:
        report.skip(f"unknown accelerator {name}")
        return None
    count = Decimal(row.get("AcceleratorCount") or "0")
    if count < 1 or count != count.to_integral_value():
        report.skip("fractional GPU")
        return None
    return canonical, int(count)


def _pair(od: Decimal | None, spot: Decimal | None, report: ParseReport) -> list[tuple[Market, Decimal]]:
    out: list[tuple[Market, Decimal]] = []
    if od is None:
        report.skip("no on-demand price")
    else:
        out.append((Market.ON_DEMAND, od))
    if spot is None:
        report.skip("no spot quote")
    else:
        out.append((Market.SPOT, spot))
    return out


def _per_row(
    rows: Iterable[_Row], origin: str, report: ParseReport, cloud: Cloud, zone_column: str | None
) -> Iterator[tuple[int, Offer]]:
    """AWS and Azure rows: one instance type with its GPUs, priced per zone (AWS) or region (Azure)."""
    for row in rows:
        gpu = _gpu(row, report)
        if gpu is None:
            continue
        name, count = gpu
        od = row.money("Price", origin)
        spot = row.money("SpotPrice", origin)
        for market, price in _pair(od, spot, report):
            report.offers += 1
            yield (
                row.line,
                Offer(
                    cloud=cloud,
                    region=row.get("Region"),
                    zone=(row.get(zone_column) or None) if zone_column else None,
                    instance_type=row.get("InstanceType"),
                    gpu=name,
                    gpus_per_instance=count,
                    gpu_memory_gib=gpus.memory_gib(name),
                    vcpus=int(row.number("vCPUs", origin)),
                    memory_gib=row.quantity("MemoryGiB", origin),
                    market=market,
                    hourly_usd=price,
                    interconnect=fabric.of(cloud.value, row.get("InstanceType")),
                ),
            )


def parse_aws(rows: Iterable[_Row], origin: str, report: ParseReport) -> Iterator[Offer]:
    return (o for _, o in _per_row(rows, origin, report, Cloud.AWS, "AvailabilityZone"))


def parse_azure(rows: Iterable[_Row], origin: str, report: ParseReport) -> Iterator[Offer]:
    return (o for _, o in _per_row(rows, origin, report, Cloud.AZURE, None))


# GCP machine families with GPUs built in: (pattern, accelerator spelling, GPU count or None
# for "the number before the trailing g").
_GCP_BUILTIN: tuple[tuple[str, str, int | None, str | None], ...] = (
    (r"a2-highgpu-(\d+)g", "A100", None, None),
    (r"a2-megagpu-(\d+)g", "A100", None, None),
    (r"a2-ultragpu-(\d+)g", "A100-80GB", None, None),
    (r"a3-highgpu-(\d+)g", "H100", None, "GPUDirect-TCPX"),
    (r"a3-edgegpu-(\d+)g(-nolssd)?", "H100", None, "GPUDirect-TCPX"),
    (r"a3-megagpu-(\d+)g", "H100-MEGA", None, "GPUDirect-TCPXO"),
    (r"a3-ultragpu-(\d+)g(-nolssd)?", "H200", None, "GPUDirect-RDMA"),
    (r"a4-highgpu-(\d+)g", "B200", None, "GPUDirect-RDMA"),
    (r"g2-standard-(4|8|12|16|32)", "L4", 1, None),
    (r"g2-standard-24", "L4", 2, None),
    (r"g2-standard-48", "L4", 4, None),
    (r"g2-standard-96", "L4", 8, None),
)
# n1 hosts that T4, V100, P4 and P100 attach to: one host size per GPU count.
GCP_N1_HOST = {1: "n1-standard-8", 2: "n1-standard-16", 4: "n1-standard-32", 8: "n1-standard-64"}
_GCP_ATTACHABLE = {"T4", "V100", "P4", "P100"}


def _gcp_builtin(machine: str) -> tuple[str, int, str | None] | None:
    for pattern, accel, fixed, interconnect in _GCP_BUILTIN:
        m = re.fullmatch(pattern, machine)
        if m:
            return accel, fixed if fixed is not None else int(m.group(1)), interconnect
    return None


def parse_gcp(rows: Iterable[_Row], origin: str, report: ParseReport) -> Iterator[Offer]:
    return (o for _, o in _gcp(rows, origin, report))


def _gcp(rows: Iterable[_Row], origin: str, report: ParseReport) -> Iterator[tuple[int, Offer]]:
    """GCP joins host rows with accelerator rows of the same zone, so it holds the file's rows
    (the one layout whose memory grows with the file; GCP catalogs are tens of thousands of rows)."""
    hosts: dict[tuple[str, str], _Row] = {}
    accels: dict[tuple[str, str, int], _Row] = {}
    for row in rows:
        itype, zone = row.get("InstanceType"), row.get("AvailabilityZone")
        if itype:
            hosts[(zone, itype)] = row
        elif row.get("AcceleratorName"):
            n_gpus = Decimal(row.get("AcceleratorCount") or "0")
            if n_gpus != n_gpus.to_integral_value() or n_gpus < 1:
                report.skip("fractional GPU")
                continue
            accels[(zone, row.get("AcceleratorName"), int(n_gpus))] = row
        else:
            report.skip("neither a host nor an accelerator")

    def emit(
        host: _Row, accel: _Row, accel_name: str, count: int, interconnect: str | None
    ) -> Iterator[tuple[int, Offer]]:
        try:
            name = gpus.canonical(accel_name)
        except UnknownGpuError:
            report.skip(f"unknown accelerator {accel_name}")
            return
        od_h, od_a = host.money("Price", origin), accel.money("Price", origin)
        sp_h, sp_a = host.money("SpotPrice", origin), accel.money("SpotPrice", origin)
        od = od_h + od_a if od_h is not None and od_a is not None else None
        spot = sp_h + sp_a if sp_h is not None and sp_a is not None else None
        for market, price in _pair(od, spot, report):
            report.offers += 1
            yield (
                host.line,
                Offer(
                    cloud=Cloud.GCP,
                    region=host.get("Region"),
                    zone=host.get("AvailabilityZone"),
                    instance_type=host.get("InstanceType"),
                    gpu=name,
                    gpus_per_instance=count,
                    gpu_memory_gib=gpus.memory_gib(name),
                    vcpus=int(host.number("vCPUs", origin)),
                    memory_gib=host.quantity("MemoryGiB", origin),
                    market=market,
                    hourly_usd=price,
                    interconnect=interconnect,
                ),
            )

    used_accels: set[tuple[str, str, int]] = set()
    for (zone, itype), host in sorted(hosts.items()):
        builtin = _gcp_builtin(itype)
        if builtin is not None:
            accel_name, count, interconnect = builtin
            accel = accels.get((zone, accel_name, count))
            if accel is None:
                report.skip("host without its GPU price")
                continue
            used_accels.add((zone, accel_name, count))
            yield from emit(host, accel, accel_name, count, interconnect)
    for (zone, accel_name, n), attached in sorted(accels.items()):
        if accel_name not in _GCP_ATTACHABLE:
            if (zone, accel_name, n) not in used_accels:
                report.skip("GPU without a host machine type")
            continue
        host_type = GCP_N1_HOST.get(n)
        n1_host = hosts.get((zone, host_type)) if host_type else None
        if n1_host is None:
            report.skip("attachable GPU without an n1 host price")
            continue
        yield from emit(n1_host, attached, accel_name, n, None)


def parse(
    lines: Iterable[str], origin: str, report: ParseReport, cloud: Cloud | None = None
) -> tuple[Cloud, list[Offer]]:
    """Parse one SkyPilot v8 vms.csv (any cloud's layout) into offers."""
    found, offers = stream(lines, origin, report, cloud)
    return found, [o for _, o in offers]


def stream(
    lines: Iterable[str], origin: str, report: ParseReport, cloud: Cloud | None = None
) -> tuple[Cloud, Iterator[tuple[int, Offer]]]:
    """The cloud of a SkyPilot v8 vms.csv (from its header, read at once) and its offers with
    the line each comes from, read as the iterator is consumed (AWS and Azure row by row)."""
    header, rows = iter_rows(lines, origin, report)
    found = detect_cloud(header, origin)
    if cloud is not None and cloud != found:
        raise ConfigError(f"{origin}: the file has the {found} layout, not {cloud}")
    if found is Cloud.GCP:
        return found, _gcp(rows, origin, report)
    return found, _per_row(rows, origin, report, found, "AvailabilityZone" if found is Cloud.AWS else None)
