"""Registry semantics: patches live for one export only, fixes run in order, bad paths are reported."""

from __future__ import annotations

import logging
import operator
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from hfexport import model_keyed
from hfexport.compat import resolve
from hfexport.exporters import registry
from hfexport.exporters.registry import (
    LOWERING_SWAP,
    PatchReport,
    apply_ir_fixes,
    apply_node_fixes,
    apply_patches,
    apply_program_fixes,
    dim_multiples,
    onnx_translation_table,
    optimizer_skips,
    register_dim_multiples,
    register_fx_node_fix,
    register_fx_program_fix,
    register_ir_fix,
    register_lowering_swap,
    register_onnx_optimizer_skip,
    register_onnx_translation,
    register_patch,
    register_static_dims,
    static_dims,
    unresolved_targets,
)
from hfexport.exporters.workarounds import dynamo as _dynamo_workarounds  # noqa: F401 - the declarations looked up here
from tests.checkout_fixture import INSTALLED, commit, make_checkout


@pytest.fixture
def isolated_registries(monkeypatch):
    """Give each test empty registries so test workarounds never leak into real exports."""
    from hfexport.exporters.backends import import_backend_modules

    import_backend_modules()  # real backends register into the real registry first, never into this one
    monkeypatch.setattr(registry.kinds, "_REGISTRY", type(registry._REGISTRY)(list))  # the dict its functions read
    return registry


@pytest.fixture
def target_module(monkeypatch):
    """A real importable module with a plain class to patch."""

    class Base:
        def greet(self):
            return "base"

    class Target(Base):
        factor = 2

        def method(self, x):
            return x + 1

        @classmethod
        def build(cls, x):
            return (cls.__name__, x)

        @staticmethod
        def helper(x):
            return x * 10

        @property
        def size(self):
            return 3

    module = types.ModuleType("hfexport_registry_target")
    module.Target = Target
    module.function = lambda x: x - 1
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module


def test_patch_applied_during_and_restored_after_success(isolated_registries, target_module):
    @register_patch("test", "hfexport_registry_target.Target.method")
    def _patch_method(original):
        return lambda self, x: original(self, x) * 100

    original = target_module.Target.method
    with apply_patches("test") as report:
        assert target_module.Target().method(1) == 200
    assert target_module.Target.method is original
    assert target_module.Target().method(1) == 2
    assert report.installed == [
        {"name": "_patch_method", "key": "test", "target": "hfexport_registry_target.Target.method"}
    ]


def test_patch_restored_after_failing_export(isolated_registries, target_module):
    @register_patch("test", "hfexport_registry_target.function")
    def _patch_function(original):
        return lambda x: "patched"

    original = target_module.function
    with pytest.raises(RuntimeError, match="export failed"), apply_patches("test"):
        assert target_module.function(1) == "patched"
        raise RuntimeError("export failed")
    assert target_module.function is original


def test_multi_path_factory_patches_every_path(isolated_registries, target_module):
    seen = []

    @register_patch("test", "hfexport_registry_target.function", "hfexport_registry_target.Target.helper")
    def _patch_both(original):
        seen.append(original)
        return lambda *args: "patched"

    with apply_patches("test"):
        assert target_module.function(1) == "patched"
        assert target_module.Target.helper(1) == "patched"
        assert target_module.Target().helper(1) == "patched"  # still a staticmethod
    assert target_module.function(1) == 0
    assert target_module.Target.helper(1) == 10
    assert len(seen) == 2


def test_classmethod_property_and_inherited_method(isolated_registries, target_module):
    @register_patch("test", "hfexport_registry_target.Target.build")
    def _patch_build(original):
        return lambda cls, x: ("patched", original(cls, x))

    @register_patch("test", "hfexport_registry_target.Target.size")
    def _patch_size(original):
        return lambda self: original.fget(self) + 1

    @register_patch("test", "hfexport_registry_target.Target.greet")
    def _patch_greet(original):
        return lambda self: "patched " + original(self)

    with apply_patches("test"):
        assert target_module.Target.build(1) == ("patched", ("Target", 1))
        assert target_module.Target().size == 4
        assert target_module.Target().greet() == "patched base"
    assert target_module.Target.build(1) == ("Target", 1)
    assert target_module.Target().size == 3
    # An inherited method is removed again from the subclass, not copied onto it.
    assert "greet" not in vars(target_module.Target)
    assert target_module.Target().greet() == "base"


def test_torch_op_patch_gets_the_original_and_can_call_it(isolated_registries):
    @register_patch("test", "torch.where", "torch.Tensor.view")
    def _patch_ops(original):
        def replacement(*args, **kwargs):
            replacement.calls += 1
            return original(*args, **kwargs)

        replacement.calls = 0
        return replacement

    condition = torch.tensor([True, False])
    with apply_patches("test"):
        assert torch.where(condition, 1.0, 2.0).tolist() == [1.0, 2.0]
        assert torch.arange(4).view(2, 2).shape == (2, 2)
        assert torch.where.calls == 1
        assert torch.Tensor.view.calls == 1
    assert not hasattr(torch.where, "calls")
    assert "view" not in vars(torch.Tensor)


def test_nested_exports_install_once_and_restore(isolated_registries, target_module):
    @register_patch("test", "hfexport_registry_target.function")
    def _patch_function(original):
        return lambda x: original(x) * 10

    original = target_module.function
    with apply_patches("test"):
        with apply_patches("test"):
            assert target_module.function(3) == 20  # not wrapped twice
        assert target_module.function(3) == 20  # inner exit keeps the outer installation
    assert target_module.function is original


def test_unresolvable_path_is_reported_not_fatal(isolated_registries, target_module, caplog):
    @register_patch("test", "hfexport_registry_target.Target.does_not_exist", "hfexport_registry_target.function")
    def _patch_typo(original):
        return lambda *args: "patched"

    with caplog.at_level(logging.WARNING, logger="hfexport"), apply_patches("test") as report:
        assert target_module.function(1) == "patched"
    assert [record["target"] for record in report.unresolved] == ["hfexport_registry_target.Target.does_not_exist"]
    assert "does_not_exist" in caplog.text
    missing = unresolved_targets("test")
    assert [(w.name, absent) for w, _, absent in missing] == [("_patch_typo", None)]


def test_a_model_module_nothing_imported_is_not_imported_to_patch_it(monkeypatch) -> None:
    # A patch of a model type no export loaded is left alone; once a model of the type is loaded, it is installed.
    import transformers.models.qwen3_vl.modeling_qwen3_vl as loaded

    target = f"{loaded.__name__}.Qwen3VLVisionAttention.forward"

    def installed() -> set[str]:
        with apply_patches("dynamo") as report:
            return {record["target"] for record in report.installed}

    assert target in installed()
    monkeypatch.delitem(sys.modules, loaded.__name__)
    assert target not in installed()
    assert loaded.__name__ not in sys.modules


def _small_graph_module():
    class Small(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x) + 1

    return torch.export.export(Small(), (torch.randn(2, 3),)).graph_module


def test_node_fixes_run_in_registration_order_and_report_changes(isolated_registries):
    calls = []

    @register_fx_node_fix("test")
    def _fix_first(graph_module, node):
        calls.append(("first", node.name))
        return False

    @register_fx_node_fix("test")
    def _fix_relu_to_sigmoid(graph_module, node):
        calls.append(("second", node.name))
        if node.op == "call_function" and node.target == torch.ops.aten.relu.default:
            node.target = torch.ops.aten.sigmoid.default
            return True
        return False

    graph_module = _small_graph_module()
    applied = apply_node_fixes("test", graph_module)
    assert applied == ["_fix_relu_to_sigmoid"]
    # For every node, "first" runs before "second".
    names = [name for kind, name in calls if kind == "first"]
    assert calls == [(kind, name) for name in names for kind in ("first", "second")]
    x = torch.randn(2, 3)
    torch.testing.assert_close(graph_module(x)[0], torch.sigmoid(x) + 1)


def test_program_fixes_run_in_registration_order(isolated_registries):
    order = []

    @register_fx_program_fix("test")
    def _fix_a(program):
        order.append("a")
        return True

    @register_fx_program_fix("test")
    def _fix_b(program):
        order.append("b")
        return False

    assert apply_program_fixes("test", object()) == ["_fix_a"]
    assert order == ["a", "b"]


def test_keys_install_in_order_and_a_delegate_key_runs_only_for_its_delegate(isolated_registries, target_module):
    @register_patch("test", "hfexport_registry_target.function")
    def _patch_backend(original):
        return lambda x: original(x) * 10

    @register_patch("test.delegate", "hfexport_registry_target.function")
    def _patch_delegate(original):
        return lambda x: original(x) + 1

    with apply_patches(("test", "test.delegate")) as report:
        assert target_module.function(3) == 21  # the later key's patch wraps the earlier key's
    with apply_patches(("test", "test.other")):
        assert target_module.function(3) == 20  # another delegate's workarounds stay out
    assert target_module.function(3) == 2
    assert [(record["name"], record["key"]) for record in report.installed] == [
        ("_patch_backend", "test"),
        ("_patch_delegate", "test.delegate"),
    ]
    listed = {(w.name, w.backend, w.delegate) for w in registry.all_workarounds("test")}
    assert listed == {("_patch_backend", "test", None), ("_patch_delegate", "test", "delegate")}


def test_lowering_swaps_are_installed_only_as_their_kind(isolated_registries, target_module):
    @register_lowering_swap("test", "hfexport_registry_target.function")
    def _patch_faster(original):
        return lambda x: "fast"

    with apply_patches("test"):
        assert target_module.function(1) == 0
    with apply_patches("test", kind=LOWERING_SWAP) as report:
        assert target_module.function(1) == "fast"
    assert [record["name"] for record in report.installed] == ["_patch_faster"]


def test_translations_resolve_their_op_and_ir_fixes_run_in_order(isolated_registries):
    @register_onnx_translation("operator.floordiv", "operator.no_such_op")
    def _aten_floordiv(self, other):
        return self

    @register_ir_fix("test")
    def _fix_ir_changes(model):
        return True

    report = PatchReport()
    assert onnx_translation_table("onnx", report) == {operator.floordiv: _aten_floordiv}
    assert report.unresolved == [{"name": "_aten_floordiv", "key": "onnx", "target": "operator.no_such_op"}]
    assert [w.name for w, _, _ in unresolved_targets("onnx")] == ["_aten_floordiv"]
    assert apply_ir_fixes("test", object()) == ["_fix_ir_changes"]


def test_registry_cli_lists_and_checks(isolated_registries, target_module):
    from click.testing import CliRunner

    from hfexport.cli import main

    @register_patch("dynamo", "hfexport_registry_target.Target.gone")
    def _patch_gone(original):
        # Stands in for a workaround whose target was renamed upstream.
        return original

    result = CliRunner().invoke(main, ["registry", "--backend", "dynamo", "--check"])
    assert result.exit_code == 1
    assert "_patch_gone" in result.output
    assert "Stands in for a workaround" in result.output
    assert "UNRESOLVED dynamo _patch_gone" in result.output


def test_optimizer_skips_name_model_classes_and_check_resolves_them(isolated_registries):
    from click.testing import CliRunner

    from hfexport.cli import main

    @register_onnx_optimizer_skip("torch.nn.Linear", "transformers.models.no_such_model.modeling.NoSuchModel")
    def _skip_optimizer_on_test_bug():
        """Stands in for an onnxscript optimizer crash on one model class."""

    assert [w.name for w in optimizer_skips("onnx", "torch.nn.Linear")] == ["_skip_optimizer_on_test_bug"]
    assert optimizer_skips("onnx", "torch.nn.Conv2d") == []
    result = CliRunner().invoke(main, ["registry", "--backend", "onnx", "--check"])
    assert result.exit_code == 0, result.output
    assert "onnx               5 ONNX IR fixes        optimizer_skip   _skip_optimizer_on_test_bug" in result.output
    assert "why: Stands in for an onnxscript optimizer crash" in result.output
    assert "absent model onnx _skip_optimizer_on_test_bug: transformers.models.no_such_model" in result.output


def test_static_dims_apply_to_models_holding_the_class_and_unresolved_classes_are_reported(isolated_registries):
    @register_static_dims("dynamo", "torch.nn.Conv2d", "torch.nn.NoSuchLayer")
    def _static_image_size_of_test_layer(name, value):
        """Stands in for a model whose trace would pin the image size."""
        return (2, 3) if name == "pixel_values" else ()

    tensors = {"pixel_values": torch.zeros(2, 3, 8, 8), "input_ids": torch.zeros(2, 5)}
    report = PatchReport()
    with_conv = torch.nn.Sequential(torch.nn.Conv2d(3, 3, 1))
    assert static_dims("dynamo", with_conv, tensors, report) == {"pixel_values": {2, 3}, "input_ids": set()}
    assert report.installed == [
        {"name": "_static_image_size_of_test_layer", "key": "dynamo", "target": "torch.nn.Conv2d"}
    ]
    assert [record["target"] for record in report.unresolved] == ["torch.nn.NoSuchLayer"]
    assert static_dims("dynamo", torch.nn.Linear(2, 2), tensors) == {}
    assert static_dims("onnx", with_conv, tensors) == {}
    (declaration,) = registry.all_workarounds("dynamo")
    assert declaration.stage == "4 dynamic shapes"


def test_dim_multiples_are_declared_from_the_first_module_of_their_class(isolated_registries):
    # Applied and recorded as static dims are (the test above); the declaration reads the module it matched.
    @register_dim_multiples("dynamo", "torch.nn.Conv2d")
    def _multiples_of_test_kernel(name, value, module):
        """Stands in for a model that takes image sizes in multiples of its windows."""
        return dict.fromkeys((2, 3), module.kernel_size[0]) if name == "pixel_values" else {}

    tensors = {"pixel_values": torch.zeros(2, 3, 8, 8), "input_ids": torch.zeros(2, 5)}
    report = PatchReport()
    convs = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Conv2d(3, 3, 4), torch.nn.Conv2d(3, 3, 2))
    assert dim_multiples("dynamo", convs, tensors, report) == {"pixel_values": {2: 4, 3: 4}}
    assert [record["name"] for record in report.installed] == ["_multiples_of_test_kernel"]
    assert static_dims("dynamo", convs, tensors) == {}
    (declaration,) = registry.all_workarounds("dynamo")
    assert declaration.stage == "4 dynamic shapes"


def test_static_dims_of_a_model_module_nothing_imported_do_not_import_it(monkeypatch) -> None:
    # As with patches: a declaration naming a class of a module no model loaded cannot apply, and the module stays out.
    import transformers.models.swin.modeling_swin as loaded

    tensors = {"pixel_values": torch.zeros(2, 3, 8, 8)}
    holding = torch.nn.Sequential(loaded.SwinLayer(loaded.SwinConfig(embed_dim=8), 8, (8, 8), 2))
    assert static_dims("dynamo", holding, tensors) == {"pixel_values": {2, 3}}
    monkeypatch.delitem(sys.modules, loaded.__name__)
    report = PatchReport()
    assert static_dims("dynamo", torch.nn.Sequential(torch.nn.Conv2d(3, 3, 1)), tensors, report) == {}
    assert loaded.__name__ not in sys.modules
    assert report.installed == report.unresolved == []


@pytest.mark.parametrize("kind", [registry.STATIC_DIMS, registry.DIM_MULTIPLES])
def test_every_dims_declaration_class_is_named_by_the_module_defining_it(kind: str) -> None:
    # Declarations skip the classes whose module is not imported: exact only if a loaded class's path names its module.
    declarations = registry.registered("dynamo", kind)
    assert declarations
    for declaration in declarations:
        for path in declaration.targets:
            assert resolve(path).__module__ == path.rpartition(".")[0], path


def test_a_target_defined_by_a_missing_internal_is_absent_with_its_feature_off(isolated_registries, monkeypatch):
    # As _aten_grouped_mm's op on a transformers without integrations.moe (4.57.6): absent there, not drifted.
    from click.testing import CliRunner

    from hfexport import compat
    from hfexport.cli import main

    missing = "transformers.integrations.hfexport_no_such_module"
    monkeypatch.setitem(compat.INTERNALS, missing, compat.Internal(missing, "a test feature"))

    @register_onnx_translation("torch.ops.hfexport_test.no_such_op.default", defined_by=missing)
    def _aten_op_of_a_missing_module(x):
        return x

    @register_onnx_translation(
        "torch.ops.transformers.hfexport_renamed_op.default", defined_by="transformers.integrations.moe"
    )
    def _aten_op_renamed_upstream(x):
        return x

    absent = {w.name: why for w, _, why in unresolved_targets("onnx")}
    assert absent == {"_aten_op_of_a_missing_module": registry.ABSENT_FEATURE, "_aten_op_renamed_upstream": None}
    result = CliRunner().invoke(main, ["registry", "--backend", "onnx", "--check"])
    assert result.exit_code == 1  # the missing internal itself, reported once
    assert f"MISSING transformers internal {missing}: off here: a test feature" in result.output
    assert "absent feature onnx _aten_op_of_a_missing_module: torch.ops.hfexport_test.no_such_op" in result.output
    assert "(off here: a test feature)" in result.output
    assert "UNRESOLVED onnx _aten_op_of_a_missing_module" not in result.output
    assert "UNRESOLVED onnx _aten_op_renamed_upstream" in result.output
    with pytest.raises(ValueError, match="not a transformers internal declared"):
        register_onnx_translation("operator.floordiv", defined_by="transformers.undeclared")


def test_the_listing_counts_every_kind_and_everything_resolves_in_the_installed_transformers() -> None:
    from click.testing import CliRunner

    from hfexport.cli import main

    result = CliRunner().invoke(main, ["registry", "--check"])
    assert result.exit_code == 0, result.output
    counts = {}
    for line in result.output.splitlines():
        if listed := re.fullmatch(r"\d+ (?:workaround|model-keyed exception)\(s\): (.+)", line):
            counts.update(entry.split(" ") for entry in listed[1].split(", "))
    assert set(counts) == {*registry.WORKAROUND_KINDS, *registry.MODEL_KEYED_KINDS}
    assert all(int(count) > 0 for count in counts.values()), counts
    assert "tiny_model_entry   hfexport.tiny_models.tables.overrides.DEGENERATE_INIT" in result.output
    assert "every patch target and model-keyed exception, all" in result.output


BERT_RENAMED = "transformers.models.bert.modeling_bert.BertRenamedModel"


@pytest.fixture
def isolated_model_exceptions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the model-keyed exceptions a test declares (the real ones are declared first, never into its list)."""
    model_keyed.model_exceptions()
    monkeypatch.setattr(model_keyed, "_MODEL_EXCEPTIONS", [])


def test_a_model_keyed_exception_is_absent_without_its_model_and_unresolved_under_another_name(
    isolated_model_exceptions: None,
) -> None:
    from click.testing import CliRunner

    from hfexport.cli import main

    model_keyed.declare(
        registry.EXPORT_SKIP,
        "TEST_SKIPS",
        "stands in for a skip whose class was renamed upstream",
        {"transformers.models.no_such_model.modeling_no_such_model.NoSuchModel": "", BERT_RENAMED: ""},
    )
    model_keyed.declare(registry.TINY_MODEL_ENTRY, "TEST_TYPES", "stands in for a newer type", ("no_such_type", "bert"))
    result = CliRunner().invoke(main, ["registry", "--kind", "export_skip", "--kind", "ir_fix", "--check"])
    assert result.exit_code == 1
    assert "2 model-keyed exception(s): export_skip 2" in result.output
    assert re.search(r"^\d+ workaround\(s\): ir_fix \d+$", result.output, re.MULTILINE)
    assert "absent model export_skip TEST_SKIPS: transformers.models.no_such_model" in result.output
    assert f"UNRESOLVED export_skip TEST_SKIPS: {BERT_RENAMED}" in result.output
    types = CliRunner().invoke(main, ["registry", "--kind", "tiny_model_entry", "--check"])
    assert types.exit_code == 0, types.output
    assert "workaround(s)" not in types.output
    assert "2 model-keyed exception(s): tiny_model_entry 2" in types.output
    assert "absent model tiny_model_entry TEST_TYPES: model type 'no_such_type'" in types.output
    assert "TEST_TYPES: model type 'bert'" not in types.output


def test_registry_options_that_select_nothing_are_usage_errors() -> None:
    from click.testing import CliRunner

    from hfexport.cli import main

    unknown = CliRunner().invoke(main, ["registry", "--kind", "patches"])
    assert unknown.exit_code == 2
    assert "--kind patches: not a kind; one of patch, lowering_swap" in unknown.output
    crossed = CliRunner().invoke(main, ["registry", "--backend", "onnx", "--kind", "cache_type"])
    assert crossed.exit_code == 2
    assert "--kind cache_type: model-keyed, not a backend's: leave out --backend" in crossed.output


# The installed file, a name in it, the name it gets in the checkout.
_RENAMED = {
    "models/reformer/modeling_reformer.py": ("ReformerDynamicCache", "ReformerBucketCache"),
    "models/lightglue/modeling_lightglue.py": ("LightGlueForKeypointMatching", "LightGlueMatcher"),
    "models/auto/auto_mappings.py": ('("timesfm2_5",', '("timesfm_2_5",'),
}


def test_check_in_a_checkout_that_renamed_the_models_reports_each_model_keyed_exception(tmp_path: Path) -> None:
    # A cache type, a skipped class and a tiny-model type renamed upstream: their exceptions no longer apply there.
    checkout = make_checkout(tmp_path / "transformers")
    files = {
        f"src/transformers/{path}": (INSTALLED / path).read_text().replace(*names) for path, names in _RENAMED.items()
    }
    commit(checkout, files, "rename three models' names")
    kinds = [option for kind in registry.MODEL_KEYED_KINDS for option in ("--kind", kind)]  # no backend to load
    command = [sys.executable, "-m", "hfexport.cli", "registry", *kinds, "--check", "--checkout", str(checkout)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    model_keyed_lines = {
        line
        for line in result.stderr.splitlines()
        if re.match(r"UNRESOLVED (export_skip|cache_type|tiny_model_entry) ", line)
    }
    reformer, lightglue = (
        "transformers.models.reformer.modeling_reformer",
        "transformers.models.lightglue.modeling_lightglue",
    )
    assert model_keyed_lines == {
        f"UNRESOLVED cache_type _OTHER_CACHE_TYPES: {reformer}.ReformerDynamicCache: "
        f"'{reformer}' has no attribute 'ReformerDynamicCache'",
        f"UNRESOLVED export_skip EXPORT_SKIPS: {lightglue}.LightGlueForKeypointMatching: "
        f"'{lightglue}' has no attribute 'LightGlueForKeypointMatching'",
        "UNRESOLVED tiny_model_entry OVERRIDES: model type 'timesfm2_5' is not in "
        "transformers.models.auto.configuration_auto.CONFIG_MAPPING_NAMES",
    }
