"""Secrets recognised by their shape, wherever they appear: a token printed by a command, a
password inside a URL, `GITHUB_TOKEN=…` in a log.

Shapes (docs/security.md lists them): GitHub tokens (`ghp_`, `gho_`, `ghu_`, `ghs_`,
`ghr_`, `github_pat_`), GitLab (`glpat-`), `sk-…` keys (OpenAI, Anthropic), Stripe
(`sk_live_`, `rk_test_`), Slack (`xox?-`), Google API keys (`AIza…`), AWS access key ids
(`AKIA…`, `ASIA…`), npm and Hugging Face tokens, JSON Web Tokens, PEM private-key blocks
(to their END line, or to the end of the base64 when cut short), the password of a URL
(`postgresql://user:PASSWORD@host`), `Bearer`/`Basic` credentials, and `NAME=value` or
`"name": "value"` pairs whose name is sensitive (`names.is_sensitive`), unless the value
is a number, a boolean or null.

Everything runs on RE2: one pass over the text, in time linear in its length, however the
text is built.  `spans` scans many strings joined by NUL (no pattern crosses a NUL), so a
reply of 10,000 strings costs one scan, not 10,000 calls.
"""

from __future__ import annotations

import re
from typing import Any

import re2

from aromcp_workflows.safety.names import is_sensitive

MASK = "***"
SEPARATOR = "\x00"  # between the strings of one scan: no pattern below matches across it
_TOKENS = (
    r"\bgh[pousr]_[A-Za-z0-9]{30,}",
    r"\bgithub_pat_[A-Za-z0-9_]{20,}",
    r"\bglpat-[A-Za-z0-9_-]{20,}",
    r"\bsk-[A-Za-z0-9_-]{20,}",
    r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}",
    r"\bxox[abposr]-[A-Za-z0-9-]{10,}",
    r"\bAIza[0-9A-Za-z_-]{35}",
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    r"\bnpm_[A-Za-z0-9]{36}",
    r"\bhf_[A-Za-z0-9]{30,}",
    r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}(?:\.[A-Za-z0-9_-]*)?",
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----(?:[^\x00]*?-----END [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----"
    r"|[A-Za-z0-9+/=\s:,.-]*)",
)
_URL = r"://[^\s\x00/?#@:]{0,128}:(?P<url>[^\s\x00/?#@]{1,256})@"
_SCHEME = r"\b(?:[Bb]earer|Basic)[ \t]+(?P<bearer>[A-Za-z0-9._~+/=-]{8,})"
_PAIR = (r"""(?:^|[^\w.%])(?P<name>[A-Za-z_%][\w.%-]{0,63})"""  # a name at a word's start
         r"""(?:\\{0,4}["'])?[ \t]{0,4}[:=][ \t]{0,4}(?P<quote>\\{0,4}["'])?""")  # `: "`, `=`, `\": \"`
_QUOTED_VALUE = re.compile(r"""[^"'\\\n\x00]{1,256}""")
_PLAIN_VALUE = re.compile(r"""(?:(?:[Bb]earer|Basic|[Tt]oken)[ \t]+)?[^\s\x00"'\\,;}\]&]{1,256}""")
_NOT_SECRET = re.compile(r"[-+\d.,:eE\s]*|true|false|null|none|True|False|None|undefined|\*\*\*")


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False
    options.max_mem = 64 << 20  # the DFA of the alternation below stays on its fast path
    return options


# Two scans: a pair's match ends at its separator, and a URL's `://` or a token must not be
# hidden inside a pair that turns out not to be sensitive (`note: "use ghp_…"`).
_TOKEN_SHAPES = re2.compile("|".join([*_TOKENS, _URL, _SCHEME]), _options())
_PAIRS = re2.compile(_PAIR, _options())
_URL_GROUP, _SCHEME_GROUP = _TOKEN_SHAPES.groupindex["url"], _TOKEN_SHAPES.groupindex["bearer"]
_NAME_GROUP, _QUOTE_GROUP = _PAIRS.groupindex["name"], _PAIRS.groupindex["quote"]


def spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every secret in `text` that its shape gives away, in order, merged."""
    found = [_token_span(match) for match in _TOKEN_SHAPES.finditer(text)]
    for match in _PAIRS.finditer(text):
        span = _pair_span(text, match)
        if span is not None:
            found.append(span)
    return _merged(found)


def _token_span(match: Any) -> tuple[int, int]:
    """All of a token; the password of a URL; the credential after `Bearer`."""
    for group in (_URL_GROUP, _SCHEME_GROUP):
        if match.start(group) >= 0:
            return match.start(group), match.end(group)
    return match.start(), match.end()


def _pair_span(text: str, match: Any) -> tuple[int, int] | None:
    """The value of a `name: value` pair whose name is sensitive and whose value is not a
    number, a boolean or null (found here, after the match, so values never hide pairs)."""
    if not is_sensitive(match.group(_NAME_GROUP)):
        return None
    quoted = match.start(_QUOTE_GROUP) >= 0
    value = (_QUOTED_VALUE if quoted else _PLAIN_VALUE).match(text, match.end())
    if value is None or _NOT_SECRET.fullmatch(value.group()):
        return None
    return value.start(), value.end()


def _merged(found: list[tuple[int, int]]) -> list[tuple[int, int]]:
    found.sort()
    merged: list[tuple[int, int]] = []
    for start, end in found:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def mask_shapes(text: str) -> str:
    """`text` with every secret its shape gives away replaced by `***`."""
    found = list(spans(text))
    if not found:
        return text
    parts, last = [], 0
    for start, end in found:
        parts += [text[last:start], MASK]
        last = end
    parts.append(text[last:])
    return "".join(parts)
