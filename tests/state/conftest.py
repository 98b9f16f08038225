"""One real V8 engine per test module (creating V8 costs ~60 ms)."""

import pytest

from aromcp_workflows.expressions import ExpressionEngine


@pytest.fixture(scope="module")
def engine():
    eng = ExpressionEngine()
    yield eng
    eng.close()
