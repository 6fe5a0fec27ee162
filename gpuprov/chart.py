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


def series(doc: PlanDocument) -> dict[str, list[int]]:
    """GPUs in use per market per slot (the same figures as the terminal chart)."""
    from gpuprov.render import gpus_by_market

    rows = gpus_by_market(doc)
    out = {m: [row.get(m, 0) for row in rows] for m in MARKETS}
    return {m: v for m, v in out.items() if any(v)}


def write_png(doc: PlanDocument, path: str) -> None:
    if not path.lower().endswith(".png"):
        raise UsageError(f"--chart writes a PNG: give a file name ending in .png, got {path!r}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingExtraError("--chart needs matplotlib", hint="pip install 'gpuprov[chart]'") from None
    data = {m: [*v, v[-1]] for m, v in series(doc).items()}  # one more point closes the last step
    hours = list(range(doc.horizon_hours + 1))
    fig, ax = plt.subplots(figsize=(10, 4), dpi=100)
    ax.stackplot(hours, *data.values(), labels=list(data), colors=[COLOURS[m] for m in data], step="post")
    demand = [sum(v[min(t, len(v) - 1)] for v in doc.demand.values()) for t in hours]
    ax.step(hours, demand, where="post", color="black", linewidth=1.2, label="demand")
    ax.set_xlabel(f"hour ({doc.timezone})")
    ax.set_ylabel(f"{doc.gpu} GPUs")
    ax.set_title(f"plan {doc.plan_id}: ${doc.costs.hourly_usd:,.2f}/h on average (billed)")
    ax.set_xlim(0, max(1, len(hours) - 1))
    ax.legend(loc="upper left", fontsize="small")
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
