"""``gpuprov terraform PLAN --out DIR`` and ``gpuprov terraform --check DIR``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpuprov import names
from gpuprov.commands import common
from gpuprov.errors import ConfigError, UsageError

if TYPE_CHECKING:
    pass


def register(app: typer.Typer) -> None:
    @app.command()
    def terraform(
        plan: str = typer.Argument(None, help="saved plan id (see gpuprov plans) or a plan JSON file"),
        out: str = typer.Option(None, "--out", help="directory to write the .tf.json files into"),
        check: str = typer.Option(None, "--check", help="check a directory of .tf.json against the provider schemas"),
        capacity_reservation: bool = typer.Option(
            False, "--capacity-reservation", help="AWS: also reserve capacity for the reserved instances"
        ),
        force: bool = typer.Option(False, "--force", help="write through a symbolic link or into a system directory"),
    ) -> None:
        """Write a saved plan as Terraform JSON that scales itself on the schedule; or check a directory."""
        from terraform.schema_check import check_dir, check_files

        if check is not None:
            if plan is not None or out is not None:
                raise UsageError("--check takes only a directory")
            folder = Path(check)
            if len(check) > common.MAX_PATH or not folder.is_dir():
                raise UsageError(f"not a directory: {names.show_path(check)}")
            problems = check_dir(folder)
            for p in problems:
                typer.echo(str(p))
            files = sorted(folder.glob("*.tf.json"))
            if problems:
                raise ConfigError(f"{len(problems)} problems in {len(files)} files under {names.show_path(check)}")
            typer.echo(f"{len(files)} files under {check} match the provider schemas")
            return
        if plan is None or out is None:
            raise UsageError("give a PLAN and --out DIR (or --check DIR)")
        out_dir = common.output_path(out, "--out", force)
        if out_dir.exists() and not out_dir.is_dir():
            raise UsageError(f"--out {names.show_path(out)} is a file, not a directory")
        from gpuprov import config
        from terraform.plan import PlanFormatError
        from terraform.render import render_plan
        from terraform.write import write_files

        bootstrap = config.load().bootstrap  # the VMs' user data, from the config (none: none rendered)
        for cloud in sorted(bootstrap.scripts):
            found = bootstrap.credential(cloud)
            if found is not None:  # a Terraform file (and its state) is no place for a credential
                raise ConfigError(
                    f"bootstrap.{cloud} holds what looks like {found}: gpuprov does not copy it into Terraform",
                    hint="have the script fetch its secret at boot (instance role, secret manager), then render again",
                )
        doc = common.load_plan(plan)
        try:
            files = render_plan(doc, capacity_reservation=capacity_reservation, bootstrap=bootstrap)
        except PlanFormatError as exc:
            raise UsageError(f"plan {plan} cannot be rendered: {exc}") from None
        problems = check_files(files)
        if problems:
            raise ConfigError(
                f"the rendered Terraform fails the schema check: {problems[0]}",
                hint="this is a gpuprov bug; please report it with the plan",
            )
        try:
            written = write_files(files, out_dir)
        except OSError as exc:
            raise UsageError(f"cannot write to {names.show_path(out)}: {exc.strerror}") from None
        console = common.console()
        for path in written:
            console.print(f"wrote {path}")
        console.print(
            f"plan {doc.plan_id}: {len(written)} files, schema check passed, "
            f"${doc.costs.monthly_usd:,.2f}/month expected (billed)"
        )
