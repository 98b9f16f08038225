"""Every computed-field example of the seed design computes the values the seed implies."""

import pytest

from aromcp_workflows.state import ComputedFieldSpec as C
from aromcp_workflows.state import StateTiers, Update

FILTERED = C("filtered_files", ["raw.file_list"], False, """input
  .filter(f => !f.includes('node_modules'))
  .filter(f => !f.includes('.min.'))
  .filter(f => !f.endsWith('.d.ts'))""")
BATCHES = C("file_batches", ["computed.filtered_files"], False, """input.reduce((batches, file, index) => {
  const batchIndex = Math.floor(index / 3);
  if (!batches[batchIndex]) batches[batchIndex] = [];
  batches[batchIndex].push(file);
  return batches;
}, []).map((files, idx) => ({
  id: `batch_${idx}`,
  files: files,
  status: 'pending'
}))""")
READY = C("ready_batches", ["computed.file_batches", "raw.batch_status"], True, """input[0].filter(batch =>
  (input[1][batch.id] || 'pending') === 'pending'
)""")


def test_filtered_files_batches_and_ready_batches(engine):
    store = StateTiers(engine, [FILTERED, BATCHES, READY])
    store.initialize({"raw": {"file_list": [], "batch_status": {}}})
    files = ["src/a.ts", "node_modules/x/index.js", "dist/app.min.js", "types/b.d.ts",
             "src/c.ts", "src/d.ts", "src/e.ts", "src/f.ts"]
    result = store.apply([Update("raw.file_list", "set", files)], trigger="step detect_files")
    kept = ["src/a.ts", "src/c.ts", "src/d.ts", "src/e.ts", "src/f.ts"]
    batches = [{"id": "batch_0", "files": kept[:3], "status": "pending"},
               {"id": "batch_1", "files": kept[3:], "status": "pending"}]
    assert store.flattened()["filtered_files"] == kept
    assert store.flattened()["file_batches"] == batches
    assert result.computed_changed == {"filtered_files": kept, "file_batches": batches,
                                       "ready_batches": batches}
    result = store.apply([Update("raw.batch_status.batch_0", "set", "completed")])
    assert result.computed_changed == {"ready_batches": [batches[1]]}
    assert result.recomputed == ["ready_batches"]


SCHEMA_FEATURES = [
    C("parsed_files", ["raw.git_output"], False, "input.split('\\n').filter(l => l.trim())"),
    C("valid_files", ["computed.parsed_files"], False,
      "input.filter(f =>\n  f.endsWith('.ts') ||\n  f.endsWith('.js')\n)"),
    C("analysis_summary", ["computed.valid_files", "raw.test_results"], True, """{
  total_files: input[0].length,
  failed_tests: input[1].failed || 0,
  ready_to_deploy: input[0].length > 0 && input[1].failed === 0
}"""),
    C("complex_calculation", ["computed.valid_files"], False, """input.map(file => ({
  path: file,
  has_test: test_results.files?.includes(file),  // MCP provides flattened access
  batch: file_batches?.findIndex(b => b.includes(file))
}))"""),
]


def test_analysis_summary_and_complex_calculation(engine):
    store = StateTiers(engine, SCHEMA_FEATURES)
    store.initialize({"raw": {"git_output": "", "test_results": {"failed": 0, "files": []}}})
    assert store.flattened()["analysis_summary"] == {
        "total_files": 0, "failed_tests": 0, "ready_to_deploy": False}
    store.apply([Update("raw.git_output", "set", "a.ts\nb.md\n\nc.js\n"),
                 Update("raw.test_results", "set", {"failed": 0, "files": ["a.ts"]}),
                 Update("raw.file_batches", "set", [["c.js"]])])
    flat = store.flattened()
    assert flat["parsed_files"] == ["a.ts", "b.md", "c.js"]
    assert flat["valid_files"] == ["a.ts", "c.js"]
    assert flat["analysis_summary"] == {"total_files": 2, "failed_tests": 0,
                                        "ready_to_deploy": True}
    assert flat["complex_calculation"] == [
        {"path": "a.ts", "has_test": True, "batch": -1},
        {"path": "c.js", "has_test": False, "batch": 0}]
    # a change to a name the transform reads directly (not in `from`) recomputes it
    result = store.apply([Update("raw.test_results.files", "set", ["c.js"])])
    assert "complex_calculation" in result.computed_changed
    assert store.flattened()["complex_calculation"][1]["has_test"] is True
    deps = store.dependencies("complex_calculation")
    assert set(deps["direct_deps"]) == {"computed.valid_files", "raw.test_results",
                                        "raw.file_batches"}
    assert store.dependencies("parsed_files")["dependents"] == [
        "computed.valid_files", "computed.analysis_summary", "computed.complex_calculation"]


ERROR_TRACKING = [
    C("can_retry", ["raw.steps_failed", "raw.retry_counts"], True,
      "input[0].some(step =>\n  (input[1][step] || 0) < 3\n)"),
    C("error_summary", ["raw.steps_failed", "raw.workflow_errors"], True, """{
  failed_count: input[0].length,
  error_types: [...new Set(input[1].map(e => e.type))],
  first_error: input[1][0]
}"""),
]
ERROR_DEFAULTS = {"raw": {"steps_completed": [], "steps_failed": [], "retry_counts": {},
                          "last_error": None, "workflow_errors": []}}


def test_can_retry_and_error_summary(engine):
    store = StateTiers(engine, ERROR_TRACKING)
    store.initialize(ERROR_DEFAULTS)
    flat = store.flattened()
    assert flat["can_retry"] is False
    assert flat["error_summary"] == {"failed_count": 0, "error_types": []}  # first_error undefined
    store.apply([Update("raw.steps_failed", "append", "lint"),
                 Update("raw.retry_counts.lint", "increment", 1),
                 Update("raw.workflow_errors", "append", {"type": "shell", "step": "lint"}),
                 Update("raw.workflow_errors", "append", {"type": "shell", "step": "x"}),
                 Update("raw.workflow_errors", "append", {"type": "timeout", "step": "y"})])
    flat = store.flattened()
    assert flat["can_retry"] is True
    assert flat["error_summary"] == {"failed_count": 1, "error_types": ["shell", "timeout"],
                                     "first_error": {"type": "shell", "step": "lint"}}
    store.apply([Update("raw.retry_counts.lint", "increment", 2)])
    assert store.flattened()["can_retry"] is False


PARSED = C("parsed_output", ["raw.command_output"], False, """try {
  return JSON.parse(input);
} catch (e) {
  return { error: 'Parse failed', raw: input };
}""")
SAFE = C("safe_calculation", ["raw.value1", "raw.value2"], True, "input[0] / input[1]",
         on_error="use_fallback", fallback=0,
         validate="typeof output === 'number' && !isNaN(output)")
PARSED_DATA = C("parsed_data", ["raw.json_output"], False, "JSON.parse(input)",
                on_error="use_fallback", fallback={})


def test_parsed_output_safe_calculation_and_parsed_data(engine):
    store = StateTiers(engine, [PARSED, SAFE, PARSED_DATA])
    store.initialize({"raw": {"command_output": '{"ok": true}', "value1": 6, "value2": 3,
                              "json_output": '{"a": 1}'}})
    flat = store.flattened()
    assert flat["parsed_output"] == {"ok": True}
    assert flat["safe_calculation"] == 2
    assert flat["parsed_data"] == {"a": 1}
    result = store.apply([Update("raw.command_output", "set", "not json"),
                          Update("raw.value1", "set", 0), Update("raw.value2", "set", 0),
                          Update("raw.json_output", "set", "{broken")])
    flat = store.flattened()
    assert flat["parsed_output"] == {"error": "Parse failed", "raw": "not json"}
    assert flat["safe_calculation"] == 0  # 0/0 is NaN: validation fails, fallback used
    assert flat["parsed_data"] == {}
    kinds = {e["field"]: e["kind"] for e in result.errors}
    assert kinds == {"safe_calculation": "validation", "parsed_data": "runtime"}


@pytest.mark.parametrize("inputs,expected", [
    ({}, {"counter": 0, "max_retries": 3, "target_branch": "main", "parallel_limit": 10}),
    ({"retries": 5, "branch": "dev", "parallel": 2},
     {"counter": 0, "max_retries": 5, "target_branch": "dev", "parallel_limit": 2}),
])
def test_default_state_initialization(engine, inputs, expected):
    store = StateTiers(engine, [], inputs=inputs)
    before = engine.stats.v8_calls
    store.initialize({"raw": {
        "counter": 0, "enabled": True, "items": [],
        "start_time": "{{ now() }}", "workflow_run_id": "{{ uuid() }}",
        "max_retries": "{{ inputs.retries || 3 }}",
        "target_branch": "{{ inputs.branch || 'main' }}",
        "config": {"timeout": 5000, "parallel_limit": "{{ inputs.parallel || 10 }}"}}})
    assert engine.stats.v8_calls - before <= 1  # all default_state templates in one call (none: all simple)
    raw = store.raw
    assert raw["counter"] == expected["counter"] and raw["enabled"] is True
    assert raw["max_retries"] == expected["max_retries"]
    assert raw["target_branch"] == expected["target_branch"]
    assert raw["config"] == {"timeout": 5000, "parallel_limit": expected["parallel_limit"]}
    assert raw["start_time"].endswith("Z") and len(raw["workflow_run_id"]) == 36
