"""The ``gpuprov`` command line: parse, compose, render. The only place that catches GpuprovError.

Heavy modules (SQLModel, PuLP, rich tables, cloud SDKs) are imported inside the commands
that use them, so ``gpuprov --help`` and ``gpuprov plan`` start fast.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import typer
from typer._click import exceptions as click_exc  # typer vendors click; pinned in pyproject
from typer.core import TyperGroup, TyperOption
from typer.exceptions import Abort, Exit

from gpuprov.errors import GpuprovError
from sdk import net as _net  # a command's --deadline counts from this import (sdk/net.py)

MAX_LINE = 1000  # an error or hint line is cut here: it may name a path or a value a user gave


class _Group(TyperGroup):
    """Every failure a user can cause ends as one line ``error: …`` and a non-zero exit."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        try:
            try:
                rc = super().main(*args, **kwargs)
            finally:
                _net.stop()  # the command is over: its --deadline must not ring, nor outlive it
        except GpuprovError as exc:
            _fail(exc.message, exc.hint, exc.exit_code, exc)
        except click_exc.NoArgsIsHelpError as exc:
            typer.echo(exc.ctx.get_help() if exc.ctx else str(exc))
            sys.exit(0)
        except click_exc.UsageError as exc:
            hint = None
            if exc.ctx is not None:
                hint = f"see '{exc.ctx.command_path} --help'"
            _fail(exc.format_message(), hint, 2, exc)
        except Abort:
            _fail("aborted", None, 130, None)
        except Exit as exc:
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            _fail("interrupted", None, 130, None)
        except OSError as exc:  # a path the OS refuses (too long, a loop, ...) that no command caught
            _fail(_os_error(exc), None, 4 if isinstance(exc, ConnectionError | TimeoutError) else 2, exc)
        _exit(rc if isinstance(rc, int) else 0)


def _os_error(exc: OSError) -> str:
    from gpuprov.names import show_path

    where = f": {show_path(str(exc.filename))}" if exc.filename else ""
    return f"{exc.strerror or type(exc).__name__}{where}"


def _fail(message: str, hint: str | None, code: int, exc: BaseException | None) -> None:
    if os.environ.get("GPUPROV_DEBUG") == "1" and exc is not None:
        import traceback

        traceback.print_exception(exc)
    from gpuprov.secrets import line

    typer.echo(f"error: {line(message, MAX_LINE)}", err=True)
    if hint:
        typer.echo(f"hint: {line(hint, MAX_LINE)}", err=True)
    _exit(code)


def _exit(code: int) -> None:
    """Exit; past a deadline that left a cloud call hanging in a worker thread, without waiting
    for it (what had to be written is written: every write is its own transaction)."""
    if _net.abandoned() and _net.own_process():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


_type_label = TyperOption.display_type_rich


def _no_flag_type(self: TyperOption, ctx: Any) -> str | None:
    """typer 0.29 labels every option with its Python type, flags too (``--save <bool>``): a
    flag takes no value, so it gets no label."""
    return None if self.is_flag else _type_label(self, ctx)


TyperOption.display_type_rich = _no_flag_type  # type: ignore[method-assign]


def _version(value: bool) -> None:
    if value:
        from gpuprov import __version__

        typer.echo(f"gpuprov {__version__}")
        raise Exit(0)


app = typer.Typer(
    cls=_Group,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Cost-optimizing GPU provisioner: the cheapest mix of reserved, on-demand and spot "
    "GPUs across AWS, GCP and Azure, hour by hour.",
)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", "-V", is_eager=True, callback=_version, help="print gpuprov's version and exit"
    ),
) -> None:
    """Cost-optimizing GPU provisioner: the cheapest mix of reserved, on-demand and spot GPUs
    across AWS, GCP and Azure, hour by hour."""


def main() -> None:
    _net.claim_process()  # the console script owns its process (a test's CliRunner does not)
    app()


from gpuprov.commands import backtest as _backtest  # noqa: E402
from gpuprov.commands import bill as _bill  # noqa: E402
from gpuprov.commands import commitments as _commitments  # noqa: E402
from gpuprov.commands import fleet as _fleet  # noqa: E402
from gpuprov.commands import k8s as _k8s  # noqa: E402
from gpuprov.commands import plan as _plan  # noqa: E402
from gpuprov.commands import policy as _policy  # noqa: E402
from gpuprov.commands import prices as _prices  # noqa: E402
from gpuprov.commands import pricing as _pricing  # noqa: E402
from gpuprov.commands import rebalance as _rebalance  # noqa: E402
from gpuprov.commands import size as _size  # noqa: E402
from gpuprov.commands import terraform as _terraform  # noqa: E402

for _module in (
    _prices,
    _pricing,
    _plan,
    _size,
    _policy,
    _commitments,
    _terraform,
    _k8s,
    _fleet,
    _rebalance,
    _backtest,
    _bill,
):
    _module.register(app)


if __name__ == "__main__":
    main()
