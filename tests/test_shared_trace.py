"""One torch.export trace shared by dynamo and ONNX: reused only where it is the program ONNX would trace.

``SharedTrace`` (``shared_trace.py``) is filled by the first export and watches the later exports' patches while it
traces (``registry.watch_patches``); the gate hands dynamo's trace of a class to its ONNX cell this way.
"""

from __future__ import annotations

import pytest
import torch
from transformers import PretrainedConfig

onnxruntime = pytest.importorskip("onnxruntime")

from support import PHRASE_IDS, PhraseMasks, max_abs_diff  # noqa: E402

from hfexport.exporters import ExportStageError, SharedTrace  # noqa: E402
from hfexport.exporters.exporter_dynamo import DynamoConfig, DynamoExporter  # noqa: E402
from hfexport.exporters.exporter_executorch import ExecutorchConfig, ExecutorchExporter  # noqa: E402
from hfexport.exporters.exporter_onnx import OnnxConfig, OnnxExporter  # noqa: E402
from hfexport.tiny_models import sample_inputs, tiny_model  # noqa: E402


def _op_types(exported) -> list[str]:
    return [node.op_type for node in exported.programs["model"].graph.all_nodes()]


def test_onnx_lowers_dynamo_trace_into_the_program_it_would_have_traced() -> None:
    model = tiny_model("LlamaForCausalLM", seed=0)
    inputs = sample_inputs(model)
    onnx, onnx_config = OnnxExporter(), OnnxConfig(dynamic=True)
    executorch, executorch_config = ExecutorchExporter(), ExecutorchConfig(dynamic=True)
    trace = SharedTrace.for_exports((onnx, onnx_config), (executorch, executorch_config))
    dynamo = DynamoExporter().export(model, inputs, DynamoConfig(dynamic=True), trace=trace)
    traced_code = dynamo.programs["model"].graph_module.code
    # Attention is patched for ExecuTorch (and XNNPACK): llama's trace is not ExecuTorch's, and that stops only it.
    assert "_patch_sdpa_as_math_attention" in trace.refusal(executorch, executorch_config, inputs)
    assert trace.refusal(onnx, onnx_config, inputs) is None

    shared = onnx.export(model, inputs, onnx_config, trace=trace)
    alone = onnx.export(model, inputs, onnx_config)

    component = shared.components["model"]
    assert component["trace_shared_from"] == "dynamo" and component["timings"]["torch.export"] == 0.0
    assert component["timings"]["reused trace (not spent)"] == dynamo.components["model"]["timings"]["torch.export"]
    assert "trace_shared_from" not in alone.components["model"]
    # The same ONNX program as ONNX's own trace gives: the same nodes, bit-identical outputs at two shapes.
    assert _op_types(shared) == _op_types(alone)
    for seed, shape in ((0, {}), (1, {"batch_size": 3, "seq_length": 11})):
        at = sample_inputs(model, seed=seed, **shape)
        assert max_abs_diff(shared(**at), alone(**at)) == 0.0
        with torch.no_grad():
            assert max_abs_diff(shared(**at), model(**at)) < 1e-4
    # ONNX rewrote its own copy: dynamo's program is the one it traced.
    assert dynamo.programs["model"].graph_module.code == traced_code


def test_a_trace_that_reaches_an_onnx_patch_is_not_reused() -> None:
    model, (input_ids, larger) = PhraseMasks(), PHRASE_IDS
    model.config = PretrainedConfig()
    onnx, onnx_config = OnnxExporter(), OnnxConfig(dynamic=True)
    trace = SharedTrace.for_exports((onnx, onnx_config))
    DynamoExporter().export(model, {"input_ids": input_ids}, DynamoConfig(dynamic=True), trace=trace)

    # isin, cummax and cummin are patched for ONNX: dynamo's trace holds the ops ONNX cannot lower.
    refusal = trace.refusal(onnx, onnx_config, {"input_ids": input_ids})
    patches = ("_patch_isin_as_comparison", "_patch_cummax_as_masked_max", "_patch_cummin_as_masked_min")
    assert refusal is not None and all(name in refusal for name in patches), refusal
    exported = onnx.export(model, {"input_ids": input_ids}, onnx_config, trace=trace)
    assert "trace_shared_from" not in exported.components["model"]
    for ids in (input_ids, larger):
        assert all(map(torch.equal, exported(input_ids=ids), model(ids)))

    # The watch is what keeps the export right: handed dynamo's trace, ONNX fails on aten.isin's searchsorted.
    trace.reached = frozenset()
    with pytest.raises(ExportStageError, match="stage 4 ONNX translations"):
        onnx.export(model, {"input_ids": input_ids}, onnx_config, trace=trace)


def test_a_trace_is_reused_only_with_the_same_options_and_inputs() -> None:
    model = tiny_model("BertModel", seed=0)
    inputs = sample_inputs(model)
    onnx = OnnxExporter()
    trace = SharedTrace.for_exports((onnx, OnnxConfig(dynamic=True)))
    DynamoExporter().export(model, inputs, DynamoConfig(dynamic=True), trace=trace)

    assert trace.refusal(onnx, OnnxConfig(dynamic=True), inputs) is None
    assert "options" in trace.refusal(onnx, OnnxConfig(dynamic=False), inputs)
    other = {**inputs, "input_ids": inputs["input_ids"].flip(1)}
    assert "sample inputs" in trace.refusal(onnx, OnnxConfig(dynamic=True), other)
    # A trace made with ONNX's patches is not dynamo's: dynamo traces its own.
    onnx_first = SharedTrace.for_exports((DynamoExporter(), DynamoConfig(dynamic=True)))
    onnx.export(model, inputs, OnnxConfig(dynamic=True), trace=onnx_first)
    assert "keys" in onnx_first.refusal(DynamoExporter(), DynamoConfig(dynamic=True), inputs)


def test_onnx_generation_lowers_dynamo_traces_of_prefill_and_decode() -> None:
    import collections

    model = tiny_model("LlamaForCausalLM", seed=0)
    inputs = sample_inputs(model)
    onnx, onnx_config = OnnxExporter(), OnnxConfig()
    traces = collections.defaultdict(lambda: SharedTrace.for_exports((onnx, onnx_config)))
    dynamo = DynamoExporter().export_for_generation(model, inputs, DynamoConfig(), traces=traces)
    shared = onnx.export_for_generation(model, inputs, onnx_config, traces=traces)
    alone = onnx.export_for_generation(model, inputs, onnx_config)
    assert sorted(traces) == ["decode", "prefill"]
    for name in ("prefill", "decode"):
        component = shared.components[name]
        assert component["trace_shared_from"] == "dynamo" and component["timings"]["torch.export"] == 0.0
        assert component["timings"]["reused trace (not spent)"] == dynamo.components[name]["timings"]["torch.export"]
        assert "trace_shared_from" not in alone.components[name]
    with torch.no_grad():
        expected = model.generate(inputs["input_ids"], max_new_tokens=4, min_new_tokens=4, do_sample=False)
    for exported in (shared, alone, dynamo):
        assert exported.generate(inputs["input_ids"], max_new_tokens=4, min_new_tokens=4).tolist() == expected.tolist()
