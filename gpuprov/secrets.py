"""Secrets never printed: one masking function for every error, warning and hint, and one test of
whether a file's text looks like it holds a credential.

``mask(text)`` replaces, anywhere in a line of text (a URL, a DSN, an SDK's message that quotes
one, a string no URL parser accepts):

* the password of a URL's userinfo (``scheme://user:PASSWORD@host``), found without parsing the
  URL, so a password holding ``/``, ``@``, ``:`` or ``[`` and a URL with a broken host are masked
  too: everything between the first ``:`` after ``://`` and the last ``@`` before the host;
* the value of any ``password=``, ``passwd=``, ``pwd=``, ``secret=``, ``token=``, ``api_key=``,
  ``access_key=``, ``sig=``, ``signature=``, ``credential=`` … parameter (query strings, libpq
  keyword DSNs such as ``host=h password=x``, ``X-Amz-Signature``);
* AWS access key ids (``AKIA…``/``ASIA…``) and PEM private key blocks.

Every ``error:``/``hint:``/``warning:`` line of the CLI goes through it (``gpuprov/cli.py``,
``commands/common.warn``), as does every database URL gpuprov prints.

``credential_like(text)`` names what in a file's text looks like a credential (an AWS access
key id, a private key, a password or secret assignment), or None: the emitters refer such files
to a Kubernetes Secret instead of copying them into a manifest.
"""

from __future__ import annotations

import re

HIDDEN = "***"
_KEYS = (
    r"password|passwd|pwd|pass|secret|client_secret|token|access_token|refresh_token|id_token|api_?key|apikey"
    r"|access_?key|secret_?key|private_?key|sig|signature|x-amz-signature|x-amz-credential|x-amz-security-token"
    r"|credential|credentials"
)
# key=value (query string, DSN keywords, env style), key: value; the value ends at & ; , space or a quote
_PARAM = re.compile(
    rf"(?i)(?<![A-Za-z0-9_-])([A-Za-z0-9_]*(?:{_KEYS}))(\s*=\s*|:(?=\S))(\"[^\"]*\"|'[^']*'|[^&;,\s\"'<>]+)"
)
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_AWS_KEY = re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}(?![A-Z0-9])")
_PEM = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.S)
_TOKEN_END = re.compile(r"[\s\"'<>`]")


def _mask_userinfo(text: str) -> str:
    out: list[str] = []
    pos = 0
    for m in _SCHEME.finditer(text):
        if m.start() < pos:
            continue
        start = m.end()
        end_m = _TOKEN_END.search(text, start)
        end = end_m.start() if end_m else len(text)
        token = text[start:end]
        at = token.rfind("@")
        if at < 0:
            continue
        # the userinfo ends at the last '@' that is not inside the path, query or fragment
        head = token[:at]
        colon = head.find(":")
        if colon < 0:
            continue  # a user name alone is not a secret
        out.append(text[pos : start + colon + 1])
        out.append(HIDDEN)
        pos = start + at
    out.append(text[pos:])
    return "".join(out)


def secret_parts(url: str) -> list[str]:
    """The pieces of ``url``'s password as a parser may have split it (at ``@``, ``:``, ``/``):
    an error about a URL quotes them in odd places ("cannot resolve host 'rest-of-pw@db'")."""
    m = _SCHEME.search(url)
    if m is None:
        return [v for _k, v in _params(url)]
    rest = url[m.end() :]
    end_m = _TOKEN_END.search(rest)
    token = rest[: end_m.start()] if end_m else rest
    at = token.rfind("@")
    colon = token.find(":")
    region = token[colon + 1 : at] if 0 <= colon < at else ""
    pieces = {region, *re.split(r"[@:/]", region)} if region else set()
    pieces |= {v for _k, v in _params(url)}
    return sorted((p for p in pieces if len(p) >= 4), key=len, reverse=True)


def _params(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(3).strip("'\"")) for m in _PARAM.finditer(text)]


def mask(text: str, known: list[str] | tuple[str, ...] = ()) -> str:
    """``text`` with every credential it holds replaced by ``***`` (see the module docstring);
    ``known``: secrets to hide wherever they appear (``secret_parts`` of a URL the text is about)."""
    if not text:
        return text
    for piece in known:
        text = text.replace(piece, HIDDEN)
    text = _PEM.sub(f"-----{HIDDEN} PRIVATE KEY-----", text)
    text = _mask_userinfo(text)
    text = _PARAM.sub(lambda m: f"{m.group(1)}{m.group(2)}{HIDDEN}", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {HIDDEN}", text)
    return _AWS_KEY.sub(f"AKIA{HIDDEN}", text)


_ASSIGNMENT = re.compile(
    r"(?i)(?<![A-Za-z0-9_-])[A-Za-z0-9_]*(password|passwd|secret|api_?key|access_?key|private_?key|token)"
    r"\s*[=:]\s*['\"]?[^\s'\"$]{4,}"
)
_AWS_SECRET = re.compile(r"(?i)aws_secret_access_key")


def credential_like(text: str) -> str | None:
    """What in ``text`` looks like a credential, or None."""
    if _AWS_KEY.search(text):
        return "an AWS access key id"
    if _AWS_SECRET.search(text):
        return "an AWS secret access key"
    if re.search(r"-----BEGIN [A-Z ]*PRIVATE KEY-----", text):
        return "a private key"
    if _mask_userinfo(text) != text:
        return "a URL with a password"
    if _ASSIGNMENT.search(text):
        return "a password or secret assignment"
    return None


URL_ENV = ("GPUPROV_DATABASE_URL", "HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy")


def line(text: str, limit: int = 1000) -> str:
    """One line fit for stderr: secrets masked (the pieces of the passwords of the URLs in the
    environment too, wherever a message quotes them), control characters escaped, at most
    ``limit`` characters (every ``error:``, ``hint:`` and ``warning:`` line of the CLI)."""
    import os

    known = [p for name in URL_ENV for p in secret_parts(os.environ.get(name, ""))]
    text = mask(" ".join(str(text).splitlines()), sorted(set(known), key=len, reverse=True))
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"
