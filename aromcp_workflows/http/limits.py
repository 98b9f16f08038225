"""The numbers an HTTP server of ours is bounded by, each from its environment variable.

One reader for every surface (`serve --http`, the web view at /ui or alone), so a bad value
is refused with the same one line wherever it is read: the variable, what it bounds, and
its default.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

Spec = Mapping[str, tuple[float, str]]  # variable: (default, what it bounds)


class LimitError(ValueError):
    """A limit's variable holds no positive number; the text names it and its default."""


def read_limits(spec: Spec, environ: Mapping[str, str] = os.environ) -> dict[str, float]:
    """Each variable of `spec`, or its default when unset: a positive number, or `LimitError`."""
    values = {}
    for name, (default, what) in spec.items():
        text = environ.get(name, "").strip()
        try:
            value = float(text) if text else float(default)
        except ValueError:
            value = -1.0
        if not value > 0:
            raise LimitError(f"{name}={text!r} is not a positive number ({what}; default {default:g})")
        values[name] = value
    return values
