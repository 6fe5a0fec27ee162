"""Read price catalogs in SkyPilot's v8 ``vms.csv`` layouts into offers.

Three layouts (the header row tells them apart):

* AWS: ``InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,
  AvailabilityZone,Arch``
  - per availability-zone id; an empty SpotPrice is "no quote". A SpotPrice equal to Price
    (SkyPilot's stand-in where it had no quote) is kept as a spot offer at that price: it is
    never cheaper than on demand, so it cannot mislead the optimizer, and imports stay exact.
* GCP: ``InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice``
  - host VM rows and accelerator rows (InstanceType empty) are separate; an offer is a
    host + its GPUs in one zone, priced as their sum. Read from a file (``stream`` with
    ``reread``) it takes two passes: the first keeps only what the join needs (the accelerator
    rows and the n1 host sizes that T4/V100/P100/P4 attach to, a few per zone), the second
    streams the host rows and emits offers, so memory does not grow with the file.
* Azure: ``InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,Generation``
  - per region; a size in Microsoft's size tables (``pricing/azure_sizes.py``) gets its GPUs
    (a share of one for a partition) and GPU memory from there; other fractional counts are skipped.

Rows that cannot become an offer are counted by reason in ``ParseReport`` rather than
dropped silently. A row that is malformed (a price that is not a number) raises
``ConfigError`` naming the line.
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal

from gpuprov.errors import ConfigError, UnknownGpuError
from gpuprov.models import Cloud, Market, Offer
from pricing import azure_sizes, gpus
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


@dataclass(frozen=True, slots=True)
class _Row:
    line: int
    values: dict[str, str]

    def get(self, key: str) -> str:
        return (self.values.get(key) or "").strip()

    def money(self, key: str, origin: str) -> Decimal | None:
        text = self.get(key)
        if not text:
            return None
        from gpuprov import numbers

        try:
            return numbers.parse(text, "price row")
        except numbers.NumberError as exc:
            raise ConfigError(f"{origin}:{self.line}: {key} {exc.reason}") from None

    def quantity(self, key: str, origin: str) -> Decimal:
        """A plain number with no trailing zeros and no exponent (``30.0`` -> ``30``)."""
        value = self.number(key, origin)
        return value.quantize(Decimal(1)) if value == value.to_integral_value() else value.normalize()

    def number(self, key: str, origin: str) -> Decimal:
        text = self.get(key)
        from gpuprov import numbers

        try:
            return numbers.parse(text, "price row")
        except numbers.NumberError as exc:
            raise ConfigError(f"{origin}:{self.line}: {key} {exc.reason}") from None


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
        from gpuprov import numbers

        try:
            number = numbers.decimal(text)
        except numbers.NumberError:
            return "non-numeric number field"
        if number < 0:
            return "negative number"
    return None


def detect_cloud(header: tuple[str, ...], origin: str) -> Cloud:
    """The layout a header names. AWS and GCP have the same ten columns: GCP's come in its own
    order (vCPUs and MemoryGiB before the accelerator, Region before Price); AWS files carry
    Arch as well."""
    cols = set(header)
    if tuple(c for c in header if c in GCP_HEADER) == GCP_HEADER and "Arch" not in cols:
        return Cloud.GCP
    if set(AWS_HEADER) <= cols:
        return Cloud.AWS
    if set(AZURE_HEADER) <= cols and "AvailabilityZone" not in cols:
        return Cloud.AZURE
    raise ConfigError(  # the header is not quoted: it may be any file's first line
        f"{origin}:1: not a SkyPilot v8 vms.csv header (it needs {','.join(AWS_HEADER)}, or the GCP or Azure columns)"
    )


def _gpu(row: _Row, report: ParseReport, whole: bool = True) -> tuple[str, int] | None:
    """(canonical GPU, count) of a row; with ``whole`` False a fractional count is kept (as 1: the
    caller corrects the size from its table)."""
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
    if not whole and 0 < count < 1:
        return canonical, 1
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
        sized = cloud is Cloud.AZURE and azure_sizes.size_of(row.get("InstanceType")) is not None
        gpu = _gpu(row, report, whole=not sized)
        if gpu is None:
            continue
        name, count = gpu
        od = row.money("Price", origin)
        spot = row.money("SpotPrice", origin)
        for market, price in _pair(od, spot, report):
            report.offers += 1
            yield (
                row.line,
                azure_sizes.corrected(
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
                    )
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


def _gcp_emit(
    host: _Row, accel: _Row, accel_name: str, count: int, interconnect: str | None, origin: str, report: ParseReport
) -> Iterator[tuple[int, Offer]]:
    """The offers (on demand, spot) of one host with its GPUs: the sum of the two rows' prices."""
    try:
        name = gpus.canonical(accel_name)
    except UnknownGpuError:
        report.skip(f"unknown accelerator {accel_name}")
        return
    od_h, od_a = host.money("Price", origin), accel.money("Price", origin)
    sp_h, sp_a = host.money("SpotPrice", origin), accel.money("SpotPrice", origin)
    od = od_h + od_a if od_h is not None and od_a is not None else None
    spot = sp_h + sp_a if sp_h is not None and sp_a is not None else None
    pairs: list[tuple[Market, Decimal]]
    if od_a is not None and sp_a is not None and od_a < sp_a:
        # the GPUs' on-demand row below their own spot row: the on-demand row is no price (anycloud
        # H200 in 6 regions: 36.60 against spot 38.74, where the other regions say 74.49 / 37.25)
        report.skip("accelerator on-demand below its own spot (no quote)")
        pairs = [(Market.SPOT, spot)] if spot is not None else []
    else:
        pairs = _pair(od, spot, report)
    for market, price in pairs:
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


def _gcp_accel(row: _Row, report: ParseReport) -> tuple[str, str, int] | None:
    """The join key (zone, accelerator, count) of an accelerator row; None (counted) if unusable."""
    n_gpus = Decimal(row.get("AcceleratorCount") or "0")
    if n_gpus != n_gpus.to_integral_value() or n_gpus < 1:
        report.skip("fractional GPU")
        return None
    return row.get("AvailabilityZone"), row.get("AcceleratorName"), int(n_gpus)


AccelKey = tuple[str, str, int]  # zone, accelerator name, GPU count


def _gcp_attached(
    keys: Iterable[AccelKey],
    accel: Callable[[AccelKey], _Row],
    used: Callable[[AccelKey], bool],
    n1_host: Callable[[str, str], _Row | None],
    origin: str,
    report: ParseReport,
) -> Iterator[tuple[int, Offer]]:
    """T4, V100, P4 and P100 on the n1 host of their count in the same zone (``keys`` in sorted
    order); other accelerator rows that no built-in host used are counted."""
    for key in keys:
        zone, accel_name, n = key
        if accel_name not in _GCP_ATTACHABLE:
            if not used(key):
                report.skip("GPU without a host machine type")
            continue
        host_type = GCP_N1_HOST.get(n)
        host = n1_host(zone, host_type) if host_type else None
        if host is None:
            report.skip("attachable GPU without an n1 host price")
            continue
        yield from _gcp_emit(host, accel(key), accel_name, n, None, origin, report)


def _gcp(rows: Iterable[_Row], origin: str, report: ParseReport) -> Iterator[tuple[int, Offer]]:
    """GCP in one pass: joins host rows with accelerator rows of the same zone by holding the
    rows in memory (for rows that are not a file, e.g. two files' rows put together; a file is
    read in two passes instead, see ``_gcp_two_pass``)."""
    hosts: dict[tuple[str, str], _Row] = {}
    accels: dict[tuple[str, str, int], _Row] = {}
    for row in rows:
        itype, zone = row.get("InstanceType"), row.get("AvailabilityZone")
        if itype:
            hosts[(zone, itype)] = row
        elif row.get("AcceleratorName"):
            key = _gcp_accel(row, report)
            if key is not None:
                accels[key] = row
        else:
            report.skip("neither a host nor an accelerator")

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
            yield from _gcp_emit(host, accel, accel_name, count, interconnect, origin, report)
    yield from _gcp_attached(
        sorted(accels),
        accels.__getitem__,
        used_accels.__contains__,
        lambda zone, itype: hosts.get((zone, itype)),
        origin,
        report,
    )


_USED = "*"


_HOST_PACKED = ("Region", "vCPUs", "MemoryGiB", "Price", "SpotPrice")


def _pack_host(row: _Row) -> str:
    """What the join reads of an n1 host row besides its zone and type, in one short string (the
    row checks keep commas out of identifiers and numbers)."""
    return ",".join((str(row.line), *(row.get(k) for k in _HOST_PACKED)))


def _unpack_host(packed: str, zone: str, itype: str) -> _Row:
    line, *values = packed.split(",")
    return _Row(
        int(line), {"AvailabilityZone": zone, "InstanceType": itype, **dict(zip(_HOST_PACKED, values, strict=True))}
    )


def _pack(row: _Row) -> str:
    """What the join reads of an accelerator row, in one short string: ``line,price,spot``
    (the row checks have made both prices numbers or empty, so neither holds a comma)."""
    return f"{row.line},{row.get('Price')},{row.get('SpotPrice')}"


def _unpack(packed: str) -> _Row:
    line, price, spot = packed.removeprefix(_USED).split(",")
    return _Row(int(line), {"Price": price, "SpotPrice": spot})


def _gcp_two_pass(
    first: Iterable[_Row], again: Callable[[], Iterable[_Row]], origin: str, report: ParseReport
) -> Iterator[tuple[int, Offer]]:
    """GCP from a file in two passes, with the offers of the one-pass ``_gcp``.

    Pass 1 (``first``, the file's rows; the row checks count into ``report``) keeps the
    accelerator rows per (zone, accelerator, count) and the n1 hosts of ``GCP_N1_HOST`` per
    zone, each packed into one short string of the fields the join reads: tens of rows per
    zone. Pass 2 (``again()``, the same rows read anew, row checks not counted twice) streams
    the host rows with built-in GPUs and emits their offers as it reads them; then the n1
    hosts with attached T4/V100/P100/P4. A host row that repeats its zone and type gives its
    offers again (the one-pass join keeps the last)."""
    from sys import intern

    n1_sizes = set(GCP_N1_HOST.values())
    n1_hosts: dict[tuple[str, str], str] = {}
    accels: dict[AccelKey, str] = {}
    for row in first:
        itype, zone = row.get("InstanceType"), row.get("AvailabilityZone")
        if itype:
            if itype in n1_sizes:
                n1_hosts[(intern(zone), intern(itype))] = _pack_host(row)
        elif row.get("AcceleratorName"):
            key = _gcp_accel(row, report)
            if key is not None:
                accels[(intern(key[0]), intern(key[1]), key[2])] = _pack(row)
        else:
            report.skip("neither a host nor an accelerator")

    for host in again():
        itype = host.get("InstanceType")
        builtin = _gcp_builtin(itype) if itype else None
        if builtin is None:
            continue
        accel_name, count, interconnect = builtin
        key = (host.get("AvailabilityZone"), accel_name, count)
        packed = accels.get(key)
        if packed is None:
            report.skip("host without its GPU price")
            continue
        if not packed.startswith(_USED):
            accels[key] = _USED + packed
        yield from _gcp_emit(host, _unpack(packed), accel_name, count, interconnect, origin, report)
    yield from _gcp_attached(
        sorted(accels),
        lambda key: _unpack(accels[key]),
        lambda key: accels[key].startswith(_USED),
        lambda zone, itype: _unpack_host(n1_hosts[(zone, itype)], zone, itype) if (zone, itype) in n1_hosts else None,
        origin,
        report,
    )


def parse(
    lines: Iterable[str], origin: str, report: ParseReport, cloud: Cloud | None = None
) -> tuple[Cloud, list[Offer]]:
    """Parse one SkyPilot v8 vms.csv (any cloud's layout) into offers."""
    found, offers = stream(lines, origin, report, cloud)
    return found, [o for _, o in offers]


def stream(
    lines: Iterable[str],
    origin: str,
    report: ParseReport,
    cloud: Cloud | None = None,
    reread: Callable[[], Iterable[str]] | None = None,
) -> tuple[Cloud, Iterator[tuple[int, Offer]]]:
    """The cloud of a SkyPilot v8 vms.csv (from its header, read at once) and its offers with
    the line each comes from, read as the iterator is consumed (AWS and Azure row by row). GCP
    joins rows: with ``reread`` (the file's lines from the start again) it reads the file twice
    and holds only the join's accelerator rows; without, it holds the rows."""
    header, rows = iter_rows(lines, origin, report)
    found = detect_cloud(header, origin)
    if cloud is not None and cloud != found:
        raise ConfigError(f"{origin}: the file has the {found} layout, not {cloud}")
    if found is Cloud.GCP:
        if reread is None:
            return found, _gcp(rows, origin, report)

        def again() -> Iterable[_Row]:
            return iter_rows(reread(), origin, ParseReport())[1]  # rows checked and counted in pass 1

        return found, _gcp_two_pass(rows, again, origin, report)
    return found, _per_row(rows, origin, report, found, "AvailabilityZone" if found is Cloud.AWS else None)
