"""One cause, one entry, and what to do: grouping failing cells and the hints, on errors real models raised.

The gate's end-to-end tests (``test_gate.py``) produce the data-dependent, specialized-dimension and
no-translation failures from real edits of a checkout; the errors below were recorded by real gate runs
(``docs/coverage.json``) and by the ones in this file's docstrings.
"""

from __future__ import annotations

from hfexport.gate.causes import failure_kind, group, hint
from hfexport.gate.cells import Cell, Frame

LINE = Frame("src/transformers/models/llama/modeling_llama.py", 63, "forward", "if x:")


def failed(model_class: str, backend: str, error_type: str, error: str, **fields) -> Cell:
    return Cell(
        "m", model_class, backend, status="fail", regression="new", error_type=error_type, error=error, **fields
    )


def test_one_line_breaking_classes_and_backends_is_one_cause_listing_them() -> None:
    guard = "Could not guard on data-dependent expression Eq(u0, 1) (unhinted: Eq(u0, 1))"
    cells = [
        failed("LlamaForCausalLM", "dynamo", "GuardOnDataDependentSymNode", guard, frame=LINE),
        failed("LlamaForCausalLM", "onnx", "GuardOnDataDependentSymNode", guard, frame=LINE),
        # Another class's message differs by its symbol: still the same line and error type.
        failed("LlamaModel", "dynamo", "GuardOnDataDependentSymNode", guard.replace("u0", "u3"), frame=LINE),
        failed("LlamaModel", "onnx", "DispatchError", "No ONNX function found for aten.foo", stage="onnx · stage 4"),
        Cell("m", "LlamaModel", "executorch", status="pass"),
    ]
    causes = group(cells)
    assert [len(c.cells) for c in causes] == [3, 1]
    assert causes[0].broken == "LlamaForCausalLM · dynamo, onnx; LlamaModel · dynamo"
    assert causes[0].where == f"{LINE.file}:63"


def test_tool_errors_and_unbuilt_classes_are_not_grouped_with_model_failures() -> None:
    same = {"error_type": "RuntimeError", "error": "boom", "stage": "build"}
    cells = [
        Cell("m", "A", "onnx", status="not_checked", **same),
        Cell("m", "A", "dynamo", status="fail", **same),
        Cell("m", "A", "executorch", status="tool_error", **same),
    ]
    assert sorted(c.cell.status for c in group(cells)) == ["fail", "not_checked", "tool_error"]


def test_hint_for_a_data_dependent_guard_names_the_expression_and_the_fixes() -> None:
    # ViltModel on every backend (docs/coverage.json), as the report records it: cut to 80 characters.
    cell = failed(
        "ViltModel",
        "dynamo",
        "GuardOnDataDependentSymNode",
        "Could not guard on data-dependent expression u0 > 1 (unhin...",
    )
    text = hint(cell)
    assert text.startswith("data-dependent") and "`u0 > 1`" in text
    assert "torch._check" in text and "torch.cond" in text and "torch.where" in text
    located = failed("A", "dynamo", "GuardOnDataDependentSymNode", "data-dependent expression Eq(u0, 1)", frame=LINE)
    assert f"at `{LINE.file}:63`" in hint(located)
    # The markdown view quotes the report's own text its way (inert code spans); the hint's words stay.
    quoted = hint(located, code=lambda text: f"<{text}>")
    assert f"at <{LINE.file}:63>" in quoted and "(<Eq(u0, 1)>)" in quoted and "`torch._check(...)`" in quoted


def test_hint_for_a_specialized_dimension_names_input_dim_and_sizes() -> None:
    # LlamaModel with a branch on input_ids.shape[1] (test_gate.py), at the second shape.
    error = (
        "model: input 'input_ids' dimension 1 has size 11, but the program accepts only size 7 (exported with dynamic "
        "shapes, but tracing specialized it: the model's code fixed this size)"
    )
    text = hint(failed("LlamaModel", "dynamo", "SpecializedDimension", error, stage="second shape"))
    assert text.startswith("specialized: tracing fixed input `input_ids` dimension 1 to 7, so the export rejects 11")


def test_hint_for_an_operator_without_translation_names_op_and_backend() -> None:
    # DFineModel on ONNX (docs/coverage.json).
    error = "No ONNX function found for <OpOverload(op='aten._is_all_true', overload=..."
    text = hint(failed("DFineModel", "onnx", "DispatchError", error))
    assert text.startswith("no translation: `onnx` cannot express `aten._is_all_true`")
    assert "hfexport/" not in text  # the reviewer's view names no hfexport path


def test_hint_for_a_missing_runtime_kernel() -> None:
    # FNetForMaskedLM on ExecuTorch (docs/coverage.json): the runtime names no operator, error 0x14 is OperatorMissing.
    text = hint(failed("FNetForMaskedLM", "executorch", "RuntimeError", "Failed to load method forward, error: 0x:14"))
    assert text.startswith("no kernel: the `executorch` runtime has no kernel for an operator (the job's log names it)")


def test_hint_for_an_output_mismatch_names_output_distance_and_shape() -> None:
    error = "at the second shape (input_ids (3, 11), attention_mask (3, 11)): logits: max abs diff 0.113 > 0.0001"
    text = hint(failed("AfmoeForCausalLM", "onnx", "OutputMismatch", error))
    assert text.startswith("wrong values: output `logits` differs from eager (`max abs diff 0.113 > 0.0001`)")
    assert "at the second shape (`input_ids (3, 11), attention_mask (3, 11)`)" in text


def test_no_hint_for_an_error_of_no_known_kind() -> None:
    assert hint(failed("A", "onnx", "KeyError", "((s4/4)//8)")) is None


def test_each_failure_has_a_kind_in_a_word_or_two_for_the_grid() -> None:
    guard = "Could not guard on data-dependent expression u0 > 1"
    specialized = "model: input 'input_ids' dimension 1 has size 11, but the program accepts only size 7"
    kinds = [
        (failed("A", "dynamo", "GuardOnDataDependentSymNode", guard), "data-dependent"),
        (failed("A", "dynamo", "SpecializedDimension", specialized), "specialized"),
        (failed("A", "onnx", "DispatchError", "No ONNX function found for aten.foo"), "no translation"),
        (failed("A", "executorch", "RuntimeError", "Failed to load method forward, error: 0x:14"), "no kernel"),
        (failed("A", "onnx", "OutputMismatch", "at the traced shape (x (2, 7)): y: max abs diff 1"), "wrong values"),
        (failed("A", "onnx", "KeyError", "((s4/4)//8)"), "fails"),
        (Cell("m", "A", "onnx", status="oom", error="out of memory"), "out of memory"),
        (Cell("m", "A", "onnx", status="tool_error", error="boom"), "tool error"),
    ]
    assert [failure_kind(cell) for cell, _ in kinds] == [words for _, words in kinds]
