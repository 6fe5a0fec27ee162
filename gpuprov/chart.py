"""``--chart FILE.png``: a stacked-area chart of GPUs by market per slot (needs matplotlib)."""

from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING, Any

from gpuprov.errors import MissingExtraError, UsageError

if TYPE_CHECKING:
    from gpuprov.plandoc import PlanDocument

MARKETS = ("reserved_1y", "reserved_3y", "on_demand", "spot")
COLOURS = {"reserved_1y": "#1f4e9c", "reserved_3y": "#3fa7d6", "on_demand": "#f2a541", "spot": "#4caf50"}
IDLE = "reserved, held but idle"
DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def series(doc: PlanDocument) -> dict[str, dict[str, list[int]]]:
    """Per workload, GPUs in use per market per slot (the terminal chart's figures, split by
    workload); under ``IDLE``, reserved GPUs held and paid in a slot but used by no workload."""
    from gpuprov.render import idle_reserved

    T = doc.horizon_hours
    out: dict[str, dict[str, list[int]]] = {w: {} for w in doc.demand}
    for a in doc.allocations:
        row = out.setdefault(a.workload, {}).setdefault(a.market, [0] * T)
        for t, n in enumerate(a.instances_by_slot):
            row[t] += n * a.gpus_per_instance
    for r in doc.reservations:
        for w, used in r.gpus_used_by_slot.items():
            row = out.setdefault(w, {}).setdefault(r.market, [0] * T)
            for t, n in enumerate(used):
                row[t] += n
    idle = idle_reserved(doc)
    if any(idle):
        out[IDLE] = {"reserved": idle}
    return {w: {m: v for m, v in sorted(by.items(), key=lambda kv: _order(kv[0])) if any(v)} for w, by in out.items()}


def _order(market: str) -> int:
    return MARKETS.index(market) if market in MARKETS else len(MARKETS)


def _ticks(doc: PlanDocument) -> tuple[list[int], list[str]]:
    """Day names at each day's start on a week; every 3 h on a day."""
    T = doc.horizon_hours
    if doc.slot_origin == "week":
        return list(range(0, T + 1, 24)), [DAYS[(t // 24) % 7] if t < T else "" for t in range(0, T + 1, 24)]
    step = 3 if T > 6 else 1
    return list(range(0, T + 1, step)), [f"{t % 24:02d}:00" for t in range(0, T + 1, step)]


def write_png(doc: PlanDocument, path: str) -> None:
    if not path.lower().endswith(".png"):
        raise UsageError(f"--chart writes a PNG: give a file name ending in .png, got {path!r}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingExtraError("--chart needs matplotlib", hint="pip install 'gpuprov[chart]'") from None
    panels = series(doc)
    hours = list(range(doc.horizon_hours + 1))
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 1.2 + 2.2 * len(panels)), dpi=100, sharex=True, squeeze=False)
    ticks, labels = _ticks(doc)
    for ax, (workload, by_market) in zip(axes[:, 0], panels.items(), strict=True):
        data = {m: [*v, v[-1]] for m, v in by_market.items()}  # one more point closes the last step
        if data:
            colours = [COLOURS.get(m, "#bbbbbb") for m in data]
            stacks = ax.stackplot(hours, *data.values(), labels=list(data), colors=colours, step="post")
            if workload == IDLE:
                for poly in stacks:
                    poly.set_hatch("//")
                    poly.set_edgecolor("#777777")
        if workload in doc.demand:
            need = doc.demand[workload]
            ax.step(
                hours, [need[min(t, len(need) - 1)] for t in hours], where="post", color="black", lw=1.2, label="demand"
            )
        ax.set_ylabel("GPUs")
        ax.set_title(
            workload if workload == IDLE else f"{workload}: {doc.gpu} GPUs by market", loc="left", fontsize="medium"
        )
        ax.set_xlim(0, max(1, len(hours) - 1))
        ax.set_ylim(bottom=0)
        ax.set_xticks(ticks, labels)
        ax.grid(axis="x", color="#dddddd", linewidth=0.6)
        # the legend beside the plot, never over the data
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    axes[-1, 0].set_xlabel(f"local time ({doc.timezone})")
    fig.suptitle(f"plan {doc.plan_id}: ${doc.costs.hourly_usd:,.2f}/h on average (billed)", x=0.01, ha="left")
    fig.tight_layout()
    save(fig, plt, path)


def save(fig: Any, plt: Any, path: str) -> None:
    """Write a figure to ``path`` atomically (a temporary file renamed into place), one line on failure."""
    from gpuprov.names import show

    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(suffix=".png", dir=folder)
        os.close(fd)
        fig.savefig(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as an ordinary file would be (mkstemp makes it 0600)
        os.replace(tmp, path)
    except OSError as exc:
        raise UsageError(f"cannot write the chart to {show(path, 80)}: {exc.strerror}") from None
    finally:
        plt.close(fig)
