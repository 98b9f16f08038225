"""Testing workflows offline: test files, cases run in process, coverage, recording.

`aromcp-workflows test` and the pytest plugin (`pytest_plugin.py`) are thin callers of
`WorkflowService`: a case starts its workflow, plays the agent from its answers and stubs,
and compares the end with its expectations (docs/testing.md).
"""
