"""``gpuprov policy check FILE`` and ``gpuprov policy presets``."""

from __future__ import annotations

import typer

from gpuprov.commands import common

policy_app = typer.Typer(help="Workload policies: check a file, list the presets.", no_args_is_help=True)


@policy_app.command("check")
def check(spec: str = typer.Argument(..., help="a policy file or preset name")) -> None:
    """Validate a policy; print its demand per slot."""
    from policies import loader
    from policies.schedule import demand_slots

    pol = loader.load(spec)
    total = pol.gpus or 100
    slots = demand_slots(pol, total)
    out = common.console()
    in_gpus = [w for w in pol.workloads.values() if w.work is None]
    out.print(
        f"{spec}: valid policy {pol.name!r}, {pol.horizon_hours} slots in {pol.timezone}, "
        f"workloads {', '.join(pol.workloads)}" + ("" if pol.gpus or not in_gpus else " (demand shown for 100 GPUs)")
    )
    for name, row in slots.items():
        work = pol.workloads[name].work
        unit = "GPUs" if work is None else f"{work.unit.replace('_per_s', '/s')} of {work.model}"
        out.print(f"  {name:>10}: {' '.join(str(v) for v in row[:24])}{' …' if len(row) > 24 else ''} ({unit})")


@policy_app.command("presets")
def presets() -> None:
    """The built-in presets."""
    from policies import loader

    for name in loader.presets():
        typer.echo(name)


def register(app: typer.Typer) -> None:
    app.add_typer(policy_app, name="policy")
