"""``gpuprov k8s PLAN --out DIR`` (Karpenter node pools, Kueue queues) and ``gpuprov k8s --check DIR``."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from datetime import datetime
from pathlib import Path

import typer

from gpuprov import names
from gpuprov.commands import common
from gpuprov.errors import ConfigError, MissingExtraError, UsageError

TAG_VALUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/=+@-]{0,127}$")


def _check(folder: Path) -> list[str]:
    try:
        from k8s.check import check_dir
    except ImportError:  # pragma: no cover - jsonschema is in the k8s extra
        raise MissingExtraError("k8s --check needs jsonschema", hint="pip install 'gpuprov[k8s]'") from None
    return check_dir(folder)


def register(app: typer.Typer) -> None:
    @app.command()
    def k8s(
        plan: str = typer.Argument(None, help="saved plan id (see gpuprov plans) or a plan JSON file"),
        out: str = typer.Option(None, "--out", help="directory to write the YAML into (replaced whole)"),
        check: str = typer.Option(None, "--check", help="validate a directory of YAML against the real schemas"),
        nodes: str = typer.Option("karpenter", "--nodes", help="karpenter or none"),
        queues: str = typer.Option("kueue", "--queues", help="kueue or none"),
        namespace: list[str] = typer.Option(None, "--namespace", help="a LocalQueue per workload in these"),
        cluster: str = typer.Option("gpuprov", "--cluster", help="the karpenter.sh/discovery tag value"),
        role: str = typer.Option("KarpenterNodeRole-gpuprov", "--role", help="the nodes' IAM role"),
        at: str = typer.Option(None, "--at", help="render the quotas of the window in force then (default: now)"),
    ) -> None:
        """Kubernetes objects that place pods as the plan says: Karpenter NodePools, Kueue queues."""
        if check is not None:
            if plan is not None or out is not None:
                raise UsageError("--check takes only a directory")
            folder = Path(check)
            if not folder.is_dir():
                raise UsageError(f"not a directory: {names.show(check, 80)}")
            problems = _check(folder)
            for p in problems:
                typer.echo(p)
            if problems:
                raise ConfigError(f"{len(problems)} problems under {names.show(check, 80)}")
            typer.echo(f"every manifest under {check} matches its schema")
            return
        if plan is None or out is None:
            raise UsageError("give a PLAN and --out DIR (or --check DIR)")
        if nodes not in ("karpenter", "none") or queues not in ("kueue", "none"):
            raise UsageError("--nodes takes karpenter or none, --queues kueue or none")
        from k8s.render import DNS1123

        for ns in common.split(namespace):
            if not DNS1123.fullmatch(ns):
                raise UsageError(f"--namespace: {names.show(ns)} is not a Kubernetes namespace name")
        if not TAG_VALUE.fullmatch(cluster) or not TAG_VALUE.fullmatch(role):
            raise UsageError("--cluster and --role: letters, digits and ._:/=+@- only")
        when = common.now()
        if at is not None:
            try:
                when = datetime.fromisoformat(at)
            except ValueError:
                raise UsageError(f"--at: not an ISO 8601 time: {names.show(at)}") from None
            if when.tzinfo is None:
                raise UsageError("--at needs a UTC offset")
        from gpuprov.commands.terraform import _load_plan
        from k8s.render import Params, dump, gcp_note, render

        doc = _load_plan(plan)
        params = Params(
            cluster=cluster,
            node_role=role,
            namespaces=tuple(common.split(namespace)),
            nodes=nodes == "karpenter",
            queues=queues == "kueue",
        )
        files = render(doc, params, when)
        target = Path(out)
        if target.exists() and not target.is_dir():
            raise UsageError(f"--out {names.show(out, 80)} is a file")
        parent = target.parent if str(target.parent) else Path(".")
        try:
            parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".gpuprov-k8s-", dir=parent))
        except OSError as exc:
            raise UsageError(f"cannot write to {names.show(out, 80)}: {exc.strerror}") from None
        try:
            for rel, docs in files.items():
                path = tmp / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(dump(docs), encoding="utf-8")
            problems = _check(tmp)
            if problems:
                raise ConfigError(
                    f"the rendered manifests fail their schemas: {problems[0]}",
                    hint="this is a gpuprov bug; please report it with the plan",
                )
            if target.exists():
                old = Path(tempfile.mkdtemp(prefix=".gpuprov-k8s-old-", dir=parent))
                os.replace(target, old / "x")
                os.replace(tmp, target)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        console = common.console()
        for rel in files:
            console.print(f"wrote {target / rel}")
        note = gcp_note(doc)
        if note:
            common.warn(note)
        console.print(
            f"plan {doc.plan_id}: {sum(len(d) for d in files.values())} objects in {len(files)} files, "
            "schema check passed"
        )
