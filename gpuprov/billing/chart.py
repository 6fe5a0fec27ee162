"""``bill report --chart FILE.png``: planned, effective and billed cost by UTC day, cumulative."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

from gpuprov.billing.report import Report
from gpuprov.errors import MissingExtraError


def write_png(r: Report, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingExtraError("--chart needs matplotlib", hint="pip install 'gpuprov[chart]'") from None
    from gpuprov.chart import save

    days: dict[str, list[Decimal]] = defaultdict(lambda: [Decimal(0)] * 3)
    if r.by == "day":
        for key, a in r.groups.items():
            days[key] = [a.planned, a.effective, a.billed]
    else:
        days[f"{r.start:%Y-%m-%d}"] = [r.totals.planned, r.totals.effective, r.totals.billed]
    keys = sorted(days)
    fig, ax = plt.subplots(figsize=(10, 4), dpi=100)
    for i, (label, colour) in enumerate((("planned", "#1f4e9c"), ("effective", "#f2a541"), ("billed", "#4caf50"))):
        total, ys = Decimal(0), []
        for k in keys:
            total += days[k][i]
            ys.append(float(total))
        ax.step(range(len(keys)), ys, where="post", label=label, color=colour)
    ax.set_xticks(range(len(keys)), keys, rotation=90, fontsize="x-small")
    ax.set_ylabel("USD, cumulative")
    ax.set_title(f"fleet {r.owner}: planned vs billed, {r.start:%Y-%m-%d} to {r.end:%Y-%m-%d} UTC")
    ax.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    save(fig, plt, path)
