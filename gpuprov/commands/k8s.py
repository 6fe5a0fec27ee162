"""``gpuprov k8s PLAN --out DIR`` (Karpenter node pools, Kueue queues, window CronJobs),
``gpuprov k8s --check DIR`` and ``gpuprov k8s apply-window PLAN --window NAME``."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from datetime import UTC, datetime
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
        plan: str = typer.Argument(None, help="saved plan id (see gpuprov plans) or a plan JSON file; or apply-window"),
        target: str = typer.Argument(None, help="with apply-window: the plan", show_default=False),
        out: str = typer.Option(
            None, "--out", help="directory to write the YAML into (replaced whole; refused if it holds other files)"
        ),
        check: str = typer.Option(None, "--check", help="validate a directory of YAML against the real schemas"),
        nodes: str = typer.Option("karpenter", "--nodes", help="karpenter or none"),
        queues: str = typer.Option("kueue", "--queues", help="kueue or none"),
        namespace: list[str] = typer.Option(None, "--namespace", help="a LocalQueue per workload in these"),
        cluster: str = typer.Option("gpuprov", "--cluster", help="the karpenter.sh/discovery tag value"),
        role: str = typer.Option("KarpenterNodeRole-gpuprov", "--role", help="the nodes' IAM role"),
        at: str = typer.Option(None, "--at", help="render the quotas of the window in force then (default: now)"),
        windows: str = typer.Option(
            "files", "--windows", help="files (windows/<name>/ to apply by hand) or cronjob (also a CronJob per edge)"
        ),
        image: str = typer.Option(None, "--image", help="with --windows cronjob: the gpuprov image, pinned"),
        sa_annotation: list[str] = typer.Option(
            None, "--service-account-annotation", help="KEY=VALUE on the window CronJobs' ServiceAccount"
        ),
        windows_namespace: str = typer.Option(
            "gpuprov", "--windows-namespace", help="with --windows cronjob: the namespace of the CronJobs"
        ),
        window: str = typer.Option(None, "--window", help="with apply-window: the window to put in force"),
        kubeconfig: str = typer.Option(None, "--kubeconfig", help="with apply-window (default: in-cluster or ~/.kube)"),
        context: str = typer.Option(None, "--context", help="with apply-window: the kubeconfig context"),
        dry_run: bool = typer.Option(False, "--dry-run", help="with apply-window: print the patches, send nothing"),
    ) -> None:
        """Kubernetes objects that place pods as the plan says: Karpenter NodePools, Kueue queues.

        gpuprov k8s apply-window PLAN --window NAME patches the ClusterQueues' quotas and the
        NodePools' GPU limits to that window's values (what the window CronJobs run)."""
        if nodes not in ("karpenter", "none") or queues not in ("kueue", "none"):
            raise UsageError("--nodes takes karpenter or none, --queues kueue or none")
        if plan == "apply-window":
            _apply_window(target, window, nodes == "karpenter", queues == "kueue", kubeconfig, context, dry_run)
            return
        if target is not None or window is not None:
            raise UsageError("a second argument and --window go with apply-window only")
        if check is not None:
            if plan is not None or out is not None:
                raise UsageError("--check takes only a directory")
            folder = Path(check)
            if len(check) > common.MAX_PATH or not folder.is_dir():
                raise UsageError(f"not a directory: {names.show_path(check)}")
            problems = _check(folder)
            for p in problems:
                typer.echo(p)
            if problems:
                raise ConfigError(f"{len(problems)} problems under {names.show(check, 80)}")
            typer.echo(f"every manifest under {check} matches its schema")
            return
        if plan is None or out is None:
            raise UsageError("give a PLAN and --out DIR (or --check DIR)")
        out_dir = _out_dir(out)
        if windows not in ("files", "cronjob"):
            raise UsageError("--windows takes files or cronjob")
        if windows == "cronjob":
            from gpuprov.emit import check_image

            image = check_image(image, "--windows cronjob")
        elif image is not None or sa_annotation:
            raise UsageError("--image and --service-account-annotation go with --windows cronjob")
        annotations = _annotations(sa_annotation)
        from k8s.render import DNS1123

        if not DNS1123.fullmatch(windows_namespace or ""):
            raise UsageError(f"--windows-namespace: {names.show(windows_namespace)} is not a Kubernetes namespace name")
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
            try:
                when = when.astimezone(UTC)
            except OverflowError:  # 0001-01-01T00:00+14:00 is before year 1 in UTC
                raise UsageError(f"--at {names.show(at)} is outside the years a calendar holds") from None
            if not 1970 <= when.year <= 9000:
                raise UsageError(f"--at {names.show(at)}: a time between 1970 and 9000 is needed")
        from k8s.render import Params, dump, edges, gcp_note, render, window_cronjobs

        doc = common.load_plan(plan)
        if windows == "cronjob" and not edges(doc):
            raise UsageError(f"plan {doc.plan_id} has no window edges: its quotas never change, nothing to schedule")
        params = Params(
            cluster=cluster,
            node_role=role,
            namespaces=tuple(common.split(namespace)),
            nodes=nodes == "karpenter",
            queues=queues == "kueue",
        )
        files = render(doc, params, when)
        if windows == "cronjob" and image is not None:
            files = dict(
                sorted({**files, **window_cronjobs(doc, image, params, annotations, windows_namespace)}.items())
            )
        parent = out_dir.parent
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
            _swap(tmp, out_dir)
        except OSError as exc:
            raise UsageError(f"cannot write to {names.show(out, 80)}: {exc.strerror}") from None
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        console = common.console()
        for rel in files:
            console.print(f"wrote {out_dir / rel}")
        note = gcp_note(doc)
        if note:
            common.warn(note)
        console.print(
            f"plan {doc.plan_id}: {sum(len(d) for d in files.values())} objects in {len(files)} files, "
            "schema check passed"
        )


def _out_dir(out: str) -> Path:
    """``--out`` as a directory gpuprov may replace whole: absent, empty, or holding only what
    ``gpuprov k8s`` writes (the names in ``k8s.render.OUTPUT_FILE``); anything else is refused,
    never deleted."""
    target = common.output_path(out, "--out")  # not empty, not too long, not a link, not a system directory
    if target.name in ("", ".", ".."):
        raise UsageError(f"--out {names.show(out, 80)}: name a directory gpuprov can replace, not . or .. or /")
    resolved = target.resolve()
    if resolved == Path.cwd().resolve() or resolved in Path.cwd().resolve().parents:
        raise UsageError(f"--out {names.show(out, 80)} is the current directory or above it")
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise UsageError(f"--out {names.show(out, 80)} is a file or a link, not a directory")
    if target.is_dir():
        try:
            foreign = _foreign(target, "")
        except OSError as exc:
            raise UsageError(f"cannot read {names.show(out, 80)}: {exc.strerror}") from None
        if foreign is not None:
            raise UsageError(
                f"--out {names.show(out, 80)} holds {names.show(foreign, 80)}, which gpuprov k8s did not write",
                hint="it is replaced whole: name a new or empty directory, or move that away",
            )
    return target


def _foreign(folder: Path, prefix: str) -> str | None:
    """The first path under ``folder`` (relative, ``/``-separated) that is not gpuprov k8s
    output: a name it never writes, a link, or anything but a plain file or directory."""
    from k8s.render import OUTPUT_DIR, OUTPUT_FILE

    with os.scandir(folder) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        rel = prefix + entry.name
        if entry.is_dir(follow_symlinks=False):
            if not OUTPUT_DIR.fullmatch(rel):
                return rel + "/"
            inner = _foreign(Path(entry.path), rel + "/")
            if inner is not None:
                return inner
        elif not entry.is_file(follow_symlinks=False) or not OUTPUT_FILE.fullmatch(rel):
            return rel
    return None


def _swap(new: Path, target: Path) -> None:
    """Put the directory ``new`` at ``target`` (renames only); the old one goes when the new one
    is in place, and comes back if it cannot be."""
    if not target.exists():
        os.replace(new, target)
        return
    old = Path(tempfile.mkdtemp(prefix=".gpuprov-k8s-old-", dir=target.parent))
    try:
        os.replace(target, old / "x")
    except OSError:
        old.rmdir()
        raise
    try:
        os.replace(new, target)
    except OSError:
        os.replace(old / "x", target)  # if even this fails, the old output stays in ``old``
        old.rmdir()
        raise
    shutil.rmtree(old, ignore_errors=True)


def _annotations(pairs: list[str] | None) -> dict[str, str]:
    from gpuprov.emit import ANNOTATION_KEY

    out = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not ANNOTATION_KEY.fullmatch(key) or len(value) > 1024 or any(ord(c) < 32 for c in value):
            raise UsageError(f"--service-account-annotation: {names.show(pair, 60)} is not KEY=VALUE")
        out[key] = value
    return out


def _apply_window(
    plan: str | None,
    window: str | None,
    nodes: bool,
    queues: bool,
    kubeconfig: str | None,
    context: str | None,
    dry_run: bool,
) -> None:
    if not plan or not window:
        raise UsageError("apply-window takes a PLAN and --window NAME")
    from k8s.render import Params, find_window, window_patches

    doc = common.load_plan(plan)
    w = find_window(doc, window)
    if w is None:
        known = ", ".join(x.name for x in doc.windows) or "none"
        raise UsageError(f"plan {doc.plan_id} has no window {names.show(window, 60)} (windows: {known})")
    patches = window_patches(doc, w, Params(nodes=nodes, queues=queues))
    if dry_run:
        import json

        for p in patches:
            typer.echo(f"PATCH {p.plural}.{p.group}/{p.name} {json.dumps(p.body, sort_keys=True)}")
        return
    from k8s.apply import api_client, apply

    for line in apply(patches, api_client(kubeconfig, context)):
        typer.echo(line)
    typer.echo(f"plan {doc.plan_id}: window {w.name} in force ({len(patches)} objects patched)")
