"""The model sets: the model types that stand for each family of architectures (decoder LM, MoE, encoder, ...), one
table read at three sizes by the gate's selection, the backends' tests and the coverage sweep (no exporter reads it).

- ``GATE_CLASSES``: the gate's representative set, the main head of each "gate" type (selected when hfexport's own
  exporters change, ``gate/changes.py``, and by ``--models representative``);
- ``CORE_MODEL_TYPES``: the "gate" and "core" types, which every backend's own tests (and ``bench_executorch.py``)
  export and round-trip;
- ``FAMILIES``: the named families' types, the coverage sweep's families and its ``representative`` set.

Imports nothing, so the gate's parent process can read it without torch or transformers; the tiny-model builder
(below the gate) does not read it.
"""

from __future__ import annotations

GATE, CORE, SWEEP = "gate", "core", "sweep"

# family -> (model type, size), in the order the coverage document lists them. Sizes nest: gate ⊂ core ⊂ sweep.
_TABLE: dict[str, tuple[tuple[str, str], ...]] = {
    "decoder LM": (
        ("llama", GATE),
        ("mistral", CORE),
        ("qwen2", CORE),
        ("qwen3", SWEEP),
        ("gemma", CORE),
        ("gemma2", SWEEP),
        ("gemma3_text", SWEEP),
        ("phi", SWEEP),
        ("phi3", SWEEP),
        ("gpt2", CORE),
        ("gpt_neox", SWEEP),
        ("opt", SWEEP),
        ("bloom", SWEEP),
        ("falcon", SWEEP),
        ("olmo2", SWEEP),
        ("granite", SWEEP),
    ),
    "MoE": (
        ("mixtral", SWEEP),
        ("qwen2_moe", SWEEP),
        ("qwen3_moe", SWEEP),
        ("olmoe", SWEEP),
        ("granitemoe", SWEEP),
        ("deepseek_v3", SWEEP),
    ),
    "encoder": (
        ("bert", GATE),
        ("roberta", CORE),
        ("distilbert", SWEEP),
        ("albert", SWEEP),
        ("electra", SWEEP),
        ("deberta_v2", SWEEP),
        ("modernbert", SWEEP),
    ),
    "encoder-decoder": (("t5", GATE), ("bart", CORE), ("marian", SWEEP), ("pegasus", SWEEP)),
    "vision": (
        ("vit", GATE),
        ("deit", SWEEP),
        ("swin", SWEEP),
        ("convnext", SWEEP),
        ("resnet", CORE),
        ("dinov2", SWEEP),
    ),
    "audio": (("wav2vec2", CORE), ("hubert", SWEEP), ("whisper", CORE)),
    # Not a named family: the sweep places these by each class's config and head (CLIP's image classifier is vision).
    "other": (("clip", CORE),),
}

# The main task head of each "gate" type: the class the tiny-model builder resolves the type to (a test checks it),
# named here because the gate's parent process does not import transformers.
_GATE_HEADS = {
    "llama": "LlamaForCausalLM",
    "bert": "BertForMaskedLM",
    "vit": "ViTForImageClassification",
    "t5": "T5ForConditionalGeneration",
}

GATE_CLASSES: tuple[tuple[str, str], ...] = tuple(
    (t, _GATE_HEADS[t]) for types in _TABLE.values() for t, size in types if size == GATE
)
FAMILIES: dict[str, tuple[str, ...]] = {f: tuple(t for t, _ in types) for f, types in _TABLE.items() if f != "other"}
CORE_MODEL_TYPES: tuple[str, ...] = tuple(t for types in _TABLE.values() for t, size in types if size in (GATE, CORE))
