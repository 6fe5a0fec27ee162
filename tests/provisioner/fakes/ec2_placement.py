"""EC2 placement groups beside moto, which has none: the recorded answers of
tests/fixtures/aws/placement_groups/ (see its PROVENANCE.md for their shape), with state.

* ``PlacementGroups.answer(region, params)`` answers ``CreatePlacementGroup`` and
  ``DescribePlacementGroups`` as EC2 does (a duplicate name is ``InvalidPlacementGroup.Duplicate``,
  an unknown name asked for ``InvalidPlacementGroup.Unknown``, both HTTP 400) and notes every
  ``RunInstances``' ``Placement.GroupName``;
* ``serve()`` runs moto's server application behind it on loopback (``AWS_ENDPOINT_URL`` for
  a driver or a ``gpuprov`` subprocess), so botocore parses the recorded XML with its real
  parser. (A botocore ``before-send`` hook cannot do it under moto's ``mock_aws``: moto's own
  hook still runs, and raises NotImplementedError.)
"""

from __future__ import annotations

import io
import itertools
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "aws" / "placement_groups"


def _template(name: str) -> str:
    return (FIXTURES / name).read_text()


class PlacementGroups:
    def __init__(self) -> None:
        self.groups: dict[tuple[str, str], dict[str, str]] = {}
        self.calls: list[tuple[str, str]] = []  # (action, group name)
        self.launched_in: list[str] = []  # RunInstances' Placement.GroupName, in order
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def _error(self, code: str, message: str) -> tuple[int, bytes]:
        body = _template("error.xml").format(code=code, message=escape(message))
        return 400, body.encode()

    def answer(self, region: str, params: dict[str, str]) -> tuple[int, bytes] | None:
        action = params.get("Action", "")
        with self._lock:
            if action == "RunInstances":
                self.launched_in.append(params.get("Placement.GroupName", ""))
                return None  # moto launches it
            if action == "CreatePlacementGroup":
                name = params.get("GroupName", "")
                self.calls.append((action, name))
                if (region, name) in self.groups:
                    return self._error(
                        "InvalidPlacementGroup.Duplicate", f"The Placement Group '{name}' already exists."
                    )
                owner = next((v for k, v in params.items() if k.endswith(".Tag.1.Value")), "")
                group = {"name": name, "strategy": params.get("Strategy", "cluster"), "owner": owner}
                group["group_id"] = f"pg-{next(self._ids):017x}"
                self.groups[(region, name)] = group
                return 200, _template("create.xml").format(**{k: escape(v) for k, v in group.items()}).encode()
            if action == "DescribePlacementGroups":
                names = [v for k, v in sorted(params.items()) if re.fullmatch(r"GroupName\.\d+", k)]
                self.calls.append((action, ",".join(names)))
                unknown = [n for n in names if (region, n) not in self.groups]
                if unknown:
                    return self._error(
                        "InvalidPlacementGroup.Unknown", f"The Placement Group '{unknown[0]}' is unknown."
                    )
                chosen = [g for (r, n), g in sorted(self.groups.items()) if r == region and (not names or n in names)]
                item = _template("item.xml")
                items = "".join(item.format(**{k: escape(v) for k, v in g.items()}) for g in chosen)
                return 200, _template("describe.xml").format(items=items).encode()
        return None

    # -- a server: moto behind the recorded answers ----------------------------------
    def wsgi(self, inner: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
        def app(environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(length) if length else b""
            environ["wsgi.input"] = io.BytesIO(body)
            params = {k: v[0] for k, v in parse_qs(body.decode(errors="replace")).items()}
            found = self.answer(_region(environ.get("HTTP_AUTHORIZATION", "")), params)
            if found is None:
                return inner(environ, start)
            status, xml = found
            start(f"{status} {'OK' if status == 200 else 'Bad Request'}", [("Content-Type", "text/xml")])
            return [xml]

        return app


def _region(authorization: str) -> str:
    m = re.search(r"Credential=[^/]+/\d+/([a-z0-9-]+)/", authorization)
    return m.group(1) if m else "us-east-1"


@contextmanager
def serve(groups: PlacementGroups) -> Iterator[str]:
    """moto's EC2 (and everything else) on loopback, with ``groups`` in front; yields its URL."""
    import logging

    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = make_server("127.0.0.1", 0, groups.wsgi(DomainDispatcherApplication(create_backend_app)), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_port}"
    import requests

    requests.post(f"{url}/moto-api/reset", timeout=30)  # moto's backends are global: start empty
    try:
        yield url
    finally:
        server.shutdown()
