"""Read a policy from YAML (a file or a built-in preset) and validate it.

Every error names the file and the key path, e.g.
``error: day.yaml: workloads.training.max_spot_fraction: must be between 0 and 1``.
"""

from __future__ import annotations

import re
from dataclasses import replace
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gpuprov.errors import ConfigError
from gpuprov.models import DEFAULT_LOST_HOURS
from gpuprov.safeyaml import describe
from policies.model import (
    DAYS,
    EXAMPLE_WORKLOADS,
    INTERCONNECTS,
    MAX_WORKLOADS,
    WORK_UNITS,
    WORKLOAD_NAME,
    Amount,
    OfferCap,
    Policy,
    RegionCap,
    Window,
    WorkDemand,
    WorkloadPolicy,
)

MAX_GPUS = 1_000_000
MAX_WORK = 1_000_000_000  # tokens or samples a second
PRECISIONS = ("fp32", "bf16", "fp8", "int8", "int4", "fp4")
MAX_USD = Decimal(10) ** 9
MARKETS = ("on_demand", "spot", "reserved_1y", "reserved_3y")
CLOUDS = ("aws", "gcp", "azure")


def valid_timezone(name: str) -> bool:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


def parse_timezone(name: str, where: str) -> str:
    if not valid_timezone(name):
        raise ConfigError(f"{where}: unknown time zone {name!r}", hint="an IANA name such as Europe/Berlin")
    return name


def presets() -> list[str]:
    folder = resources.files("policies") / "presets"
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


def load(spec: str) -> Policy:
    """A preset name (``day-night``) or a path to a YAML file."""
    if spec in presets():
        text = (resources.files("policies") / "presets" / f"{spec}.yaml").read_text(encoding="utf-8")
        return parse(text, f"preset {spec}")
    from gpuprov.names import show
    from gpuprov.safeyaml import read_text

    try:
        path = Path(spec)
        exists = path.exists()
    except (OSError, ValueError):
        exists = False
    if not exists:
        raise ConfigError(f"no policy file or preset named {show(spec)}", hint=f"presets: {', '.join(presets())}")
    return parse(read_text(path, spec[:200]), spec[:200])


def parse(text: str, origin: str) -> Policy:
    from gpuprov.safeyaml import load_text

    return _Reader(origin).policy(load_text(text, origin))


def _key(key: object) -> str:
    """A mapping key for an error path: itself when it is a plain name (letters, digits, ``_-``,
    at most 40 characters: what a policy's keys are), else "a key of N characters", never the
    text (errors never quote a file: a stray file's first line is no key)."""
    text = str(key)
    if re.fullmatch(r"[A-Za-z0-9_-]{1,40}", text):
        return text
    return f"(a key of {len(text)} characters)"


class _Reader:
    def __init__(self, origin: str) -> None:
        self.origin = origin

    def fail(self, path: str, message: str) -> ConfigError:
        return ConfigError(f"{self.origin}: {path or '(top level)'}: {message}")

    def mapping(self, value: Any, path: str, keys: tuple[str, ...]) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(path, "must be a mapping")
        unknown = sorted(_key(k) for k in value if k not in keys)
        if unknown:
            raise self.fail(
                f"{path}.{unknown[0]}" if path else unknown[0], f"unknown key (expected one of: {', '.join(keys)})"
            )
        return value

    def integer(self, value: Any, path: str, low: int = 0, high: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"must be a whole number, got {describe(value)}")
        if value < low or (high is not None and value > high):
            raise self.fail(
                path, f"must be between {low} and {high}" if high is not None else f"must be at least {low}"
            )
        return value

    def decimal(self, value: Any, path: str, low: Decimal | None = None, high: Decimal | None = None) -> Decimal:
        from gpuprov import numbers

        if isinstance(value, bool):
            raise self.fail(path, f"must be a number, got {describe(value)}")
        try:
            d = numbers.decimal(value)  # the one bounded parser: no NaN, no 1e-999999999
        except numbers.NumberError as exc:
            raise self.fail(path, exc.reason) from None
        if (low is not None and d < low) or (high is not None and d > high):
            raise self.fail(
                path, f"must be between {low} and {high}" if high is not None else f"must be at least {low}"
            )
        return d

    def strings(self, value: Any, path: str, allowed: tuple[str, ...] | None = None) -> tuple[str, ...]:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(path, "must be a list of strings")
        if allowed is not None:
            for i, v in enumerate(value):
                if v not in allowed:
                    raise self.fail(f"{path}[{i}]", f"unknown value (expected one of: {', '.join(allowed)})")
        return tuple(value)

    def amount(self, value: Any, path: str) -> Amount:
        """70% / 0.7 (a fraction of the total), 45 (GPUs), or {tokens_per_s: 20000} (work a second,
        rounded up to a whole unit)."""
        if isinstance(value, dict):
            raw = self.mapping(value, path, WORK_UNITS)
            if len(raw) != 1:
                raise self.fail(path, f"give one of {', '.join(WORK_UNITS)}")
            [(unit, n)] = raw.items()
            d = self.decimal(n, f"{path}.{unit}", Decimal(0), Decimal(MAX_WORK))
            return Amount(work=int(d.to_integral_value(rounding="ROUND_CEILING")), unit=unit)
        if isinstance(value, str) and value.strip().endswith("%"):
            return Amount(fraction=self.decimal(value.strip()[:-1], path, Decimal(0), Decimal(100)) / 100)
        if isinstance(value, float):
            return Amount(fraction=self.decimal(value, path, Decimal(0), Decimal(1)))
        return Amount(gpus=self.integer(value, path, 0, MAX_GPUS))

    def label(self, value: Any, path: str) -> str:
        """A name that reaches plans, Terraform, manifests and tables: one line, at most 100 characters."""
        if not isinstance(value, str | int) or isinstance(value, bool):
            raise self.fail(path, f"must be a name, got {describe(value)}")
        text = str(value)
        if not text or len(text) > 100 or any(ord(c) < 32 or ord(c) == 127 for c in text):
            raise self.fail(path, "must be one line of 1-100 characters, without control characters")
        return text

    def gpu(self, value: Any) -> str | None:
        """A GPU type, or (for work-unit demand) a list of the types to consider, kept as one
        comma-separated string."""
        if value is None:
            return None
        if isinstance(value, list):
            if not value:
                raise self.fail("gpu", "must name at least one GPU type")
            names = [self.label(v, f"gpu[{i}]") for i, v in enumerate(value)]
        else:
            names = [self.label(value, "gpu")]
        for i, name in enumerate(names):  # GPU type names are short words: a, h100, a100-80gb, rtx-pro-6000
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,39}", name):
                where = "gpu" if not isinstance(value, list) else f"gpu[{i}]"
                raise self.fail(where, "must be a GPU type such as h100 or a100-80gb (letters, digits, '.', '_', '-')")
        return ",".join(names)

    def hour(self, value: Any, path: str) -> int:
        text = value if isinstance(value, str) else f"{value}"
        m = re.fullmatch(r"(\d{1,2}):00", text.strip())
        if not m or int(m.group(1)) > 23:
            raise self.fail(path, f"must be a whole hour like '08:00', got {describe(value)}")
        return int(m.group(1))

    def policy(self, doc: Any) -> Policy:
        top = self.mapping(
            doc,
            "",
            (
                "name",
                "gpu",
                "gpus",
                "timezone",
                "horizon_hours",
                "markets",
                "clouds",
                "regions",
                "workloads",
                "schedule",
                "caps",
                "budget_per_hour",
                "spot_interruption",
                "max_price_age_hours",
            ),
        )
        tz = str(top.get("timezone", "UTC"))
        if not valid_timezone(tz):
            raise self.fail("timezone", "unknown time zone (an IANA name such as Europe/Berlin)")
        horizon = self.integer(top.get("horizon_hours", 24), "horizon_hours")
        if horizon not in (24, 168):
            raise self.fail("horizon_hours", "must be 24 (a day) or 168 (a week)")
        workloads = self.workloads(top.get("workloads"))
        default, windows = self.schedule(top.get("schedule"), workloads)
        clouds = self.mapping(top.get("clouds"), "clouds", ("allow", "deny"))
        regions = self.mapping(top.get("regions"), "regions", ("allow", "deny"))
        offer_caps, region_caps = self.caps(top.get("caps"))
        rates: dict[str, Decimal] = {}  # only what the policy sets: pools carry their own rates
        for cloud, rate in self.mapping(top.get("spot_interruption"), "spot_interruption", CLOUDS).items():
            rates[cloud] = self.decimal(rate, f"spot_interruption.{cloud}", Decimal(0), Decimal(1))
        gpus = top.get("gpus")
        return Policy(
            name=self.label(top.get("name", "policy"), "name"),
            gpu=self.gpu(top.get("gpu")),
            gpus=None if gpus is None else self.integer(gpus, "gpus", 1, MAX_GPUS),
            timezone=tz,
            horizon_hours=horizon,
            workloads=workloads,
            default_demand=default,
            windows=windows,
            markets=None if top.get("markets") is None else self.strings(top["markets"], "markets", MARKETS),
            clouds_allow=self.strings(clouds.get("allow", []), "clouds.allow", CLOUDS),
            clouds_deny=self.strings(clouds.get("deny", []), "clouds.deny", CLOUDS),
            regions_allow=self.strings(regions.get("allow", []), "regions.allow"),
            regions_deny=self.strings(regions.get("deny", []), "regions.deny"),
            offer_caps=offer_caps,
            region_caps=region_caps,
            budget_per_hour=(
                None
                if top.get("budget_per_hour") is None
                else self.decimal(top["budget_per_hour"], "budget_per_hour", Decimal(0), MAX_USD)
            ),
            interruptions_per_hour=rates,
            max_price_age_hours=self.decimal(
                top.get("max_price_age_hours", 24), "max_price_age_hours", Decimal(0), Decimal(8760)
            ),
        )

    def workloads(self, value: Any) -> dict[str, WorkloadPolicy]:
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise self.fail("workloads", "must be a mapping")
        if not value:
            raise self.fail("workloads", f"name at least one workload (e.g. {', '.join(EXAMPLE_WORKLOADS)})")
        if len(value) > MAX_WORKLOADS:
            raise self.fail("workloads", f"at most {MAX_WORKLOADS} workloads, got {len(value)}")
        for name in value:
            if not isinstance(name, str) or not re.fullmatch(WORKLOAD_NAME, name):
                raise self.fail(
                    f"workloads.{_key(name)}",
                    "a workload name is 1-30 lower-case letters, digits and inner dashes, starting with a letter",
                )
        raw: dict[str, Any] = value
        out = {}
        for name, spec in raw.items():
            path = f"workloads.{name}"
            w = self.mapping(
                spec,
                path,
                (
                    "max_spot_fraction",
                    "node_gpus",
                    "gang",
                    "spread_zones",
                    "lost_hours_per_interruption",
                    "interconnect",
                    "model",
                    "precision",
                    "input_tokens",
                    "output_tokens",
                    "dataset",
                    "sequences",
                ),
            )
            fabric = w.get("interconnect", "any")
            if fabric not in INTERCONNECTS:
                raise self.fail(f"{path}.interconnect", f"must be one of: {', '.join(INTERCONNECTS)}")
            gang = w.get("gang", False)
            if not isinstance(gang, bool):
                raise self.fail(f"{path}.gang", "must be true or false")
            # lost work per interruption: the default of its name, else of its shape (a gang
            # restarts from a checkpoint like training; anything else loses what inference does)
            lost = DEFAULT_LOST_HOURS.get(name, DEFAULT_LOST_HOURS["training" if gang else "inference"])
            node = w.get("node_gpus")
            out[name] = WorkloadPolicy(
                max_spot_fraction=self.decimal(
                    w.get("max_spot_fraction", "0.5"), f"{path}.max_spot_fraction", Decimal(0), Decimal(1)
                ),
                node_gpus=None if node is None else self.integer(node, f"{path}.node_gpus", 1, 64),
                gang=gang,
                spread_zones=self.integer(w.get("spread_zones", 1), f"{path}.spread_zones", 1, 16),
                lost_hours_per_interruption=self.decimal(
                    w.get("lost_hours_per_interruption", lost),
                    f"{path}.lost_hours_per_interruption",
                    Decimal(0),
                    Decimal(168),
                ),
                interconnect=fabric,
                work=self.work(w, path),
            )
            if gang and out[name].spread_zones > 1:
                raise self.fail(path, "a gang sits in one zone: it cannot also spread over zones")
        return out

    def work(self, w: dict[str, Any], path: str) -> WorkDemand | None:
        """A workload that names a model states its demand in work units (the unit is filled in
        from its schedule)."""
        keys = ("precision", "input_tokens", "output_tokens", "dataset", "sequences")
        if "model" not in w:
            extra = [k for k in keys if k in w]
            if extra:
                raise self.fail(f"{path}.{extra[0]}", "goes with model (demand in tokens_per_s or samples_per_s)")
            return None
        model = self.label(w["model"], f"{path}.model")
        if "precision" not in w:
            raise self.fail(f"{path}.precision", "is required with model (fp32, bf16, fp16, fp8, int8, int4, fp4)")
        precisions = []
        for i, p in enumerate(self.strings(w["precision"], f"{path}.precision")):
            key = p.strip().lower()
            key = {"fp16": "bf16", "float16": "bf16", "bfloat16": "bf16", "float32": "fp32"}.get(key, key)
            if key not in PRECISIONS:
                raise self.fail(
                    f"{path}.precision[{i}]", f"unknown precision (expected one of: {', '.join(PRECISIONS)})"
                )
            precisions.append(key)
        lengths = {
            k: None if w.get(k) is None else self.integer(w[k], f"{path}.{k}", 1, 10_000_000)
            for k in ("input_tokens", "output_tokens", "sequences")
        }
        dataset = None if w.get("dataset") is None else self.label(w["dataset"], f"{path}.dataset")
        return WorkDemand(
            unit="",
            model=model,
            precisions=tuple(dict.fromkeys(precisions)),
            input_tokens=lengths["input_tokens"],
            output_tokens=lengths["output_tokens"],
            dataset=dataset,
            sequences=lengths["sequences"],
        )

    def units(
        self, workloads: dict[str, WorkloadPolicy], default: dict[str, Amount], windows: list[Window]
    ) -> dict[str, WorkloadPolicy]:
        """Each workload's demand in one kind: GPUs (or shares) without a model, one work unit with one."""
        found: dict[str, set[str]] = {name: set() for name in workloads}
        rows = [
            ("schedule.default", default),
            *((f"schedule.windows[{i}].demand", w.demand) for i, w in enumerate(windows)),
        ]
        for where, row in rows:
            for name, a in row.items():
                kind = a.unit or "gpus"
                wp = workloads[name]
                if (wp.work is None) != (kind == "gpus"):
                    raise self.fail(
                        f"{where}.{name}",
                        "a workload with a model asks for {tokens_per_s: N} or {samples_per_s: N}"
                        if wp.work is not None
                        else f"work a second needs the workload's model and precision (workloads.{name}.model)",
                    )
                found[name].add(kind)
        out = dict(workloads)
        for name, kinds in found.items():
            if len(kinds) > 1:
                raise self.fail(f"workloads.{name}", f"its demand mixes {' and '.join(sorted(kinds))}")
            wp = workloads[name]
            if wp.work is not None:
                unit = next(iter(kinds), "tokens_per_s")
                spec = wp.work
                if (
                    unit == "tokens_per_s"
                    and spec.dataset is None
                    and (spec.input_tokens is None or spec.output_tokens is None)
                ):
                    raise self.fail(
                        f"workloads.{name}",
                        "tokens_per_s needs input_tokens and output_tokens (the lengths the throughput rows "
                        "measured), or a dataset",
                    )
                out[name] = replace(wp, work=replace(spec, unit=unit))
        return out

    def demand(self, value: Any, path: str, workloads: dict[str, WorkloadPolicy]) -> dict[str, Amount]:
        raw = self.mapping(value, path, tuple(workloads))
        return {name: self.amount(v, f"{path}.{name}") for name, v in raw.items()}

    def schedule(
        self, value: Any, workloads: dict[str, WorkloadPolicy]
    ) -> tuple[dict[str, Amount], tuple[Window, ...]]:
        raw = self.mapping(value, "schedule", ("default", "windows"))
        default = self.demand(raw.get("default", {}), "schedule.default", workloads)
        windows_raw = raw.get("windows", [])
        if not isinstance(windows_raw, list):
            raise self.fail("schedule.windows", "must be a list")
        windows = []
        for i, spec in enumerate(windows_raw):
            path = f"schedule.windows[{i}]"
            w = self.mapping(spec, path, ("name", "start", "end", "days", "demand"))
            for key in ("start", "end", "demand"):
                if key not in w:
                    raise self.fail(f"{path}.{key}", "is required")
            windows.append(
                Window(
                    name=self.label(w.get("name", f"window{i}"), f"{path}.name"),
                    start_hour=self.hour(w["start"], f"{path}.start"),
                    end_hour=self.hour(w["end"], f"{path}.end"),
                    days=self.strings(w.get("days", list(DAYS)), f"{path}.days", DAYS),
                    demand=self.demand(w["demand"], f"{path}.demand", workloads),
                )
            )
        if not default and not windows:
            raise self.fail("schedule", "give a default demand or at least one window")
        workloads.update(self.units(workloads, default, windows))
        return default, tuple(windows)

    def caps(self, value: Any) -> tuple[tuple[OfferCap, ...], tuple[RegionCap, ...]]:
        raw = self.mapping(value, "caps", ("offers", "regions"))
        offer_caps, region_caps = [], []
        for i, spec in enumerate(raw.get("offers", []) or []):
            path = f"caps.offers[{i}]"
            c = self.mapping(spec, path, ("cloud", "region", "zone", "instance_type", "market", "max_instances"))
            if "max_instances" not in c:
                raise self.fail(f"{path}.max_instances", "is required")
            offer_caps.append(
                OfferCap(
                    **{k: str(c.get(k, "*")) for k in ("cloud", "region", "zone", "instance_type", "market")},
                    max_instances=self.integer(c["max_instances"], f"{path}.max_instances"),
                )
            )
        for i, spec in enumerate(raw.get("regions", []) or []):
            path = f"caps.regions[{i}]"
            c = self.mapping(spec, path, ("cloud", "region", "max_instances"))
            for key in ("cloud", "region", "max_instances"):
                if key not in c:
                    raise self.fail(f"{path}.{key}", "is required")
            region_caps.append(
                RegionCap(str(c["cloud"]), str(c["region"]), self.integer(c["max_instances"], f"{path}.max_instances"))
            )
        return tuple(offer_caps), tuple(region_caps)
