"""The web view of running instances (`aromcp-workflows ui`); see `app.py`.

The face: what other packages may use, each name loaded with its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aromcp_workflows import lazy_face

if TYPE_CHECKING:
    from aromcp_workflows.web.login import to_file
    from aromcp_workflows.web.run import ACTIONS_ON, UI_PATH, UiOptions, login_file, mount_ui, run_ui, url_of
    from aromcp_workflows.web.streams import StreamQuota

__all__ = ["ACTIONS_ON", "UI_PATH", "StreamQuota", "UiOptions", "login_file", "mount_ui", "run_ui", "to_file", "url_of"]
__getattr__ = lazy_face(
    __name__,
    {
        "StreamQuota": "streams",
        "to_file": "login",
        "UiOptions": "run",
        "login_file": "run",
        "UI_PATH": "run",
        "mount_ui": "run",
        "run_ui": "run",
        "url_of": "run",
        "ACTIONS_ON": "run",
    },
)
