"""A transformers checkout's ``tests/`` tree, laid out as in the public repository, for the model tester tests.

Only what ``tiny_config(..., checkout=...)`` imports: the packages down to ``tests/models/llama``, llama's test file
and the common tester modules it reaches through relative imports (``from ...causal_lm_tester import ...``). The
modules are minimal stand-ins written for these tests, with the public repository's names and import style. They are
kept as strings so that pytest never collects them.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

# The llama tester's own sizes: none is the builder's, so a test can tell whose config a model was built from.
TESTER_HIDDEN_SIZE = 24
TESTER_LAYERS = 3
TESTER_INTERMEDIATE_SIZE = 37

CONFIGURATION_COMMON = """
from transformers.testing_utils import require_torch


class ConfigTester:
    def __init__(self, parent, config_class=None, has_text_modality=True, **kwargs):
        self.parent = parent
        self.config_class = config_class
        self.has_text_modality = has_text_modality
        self.inputs_dict = kwargs

    def create_and_test_config_to_dict(self):
        config = self.config_class(**self.inputs_dict)
        self.parent.assertEqual(self.config_class(**config.to_dict()).to_dict(), config.to_dict())

    def run_common_tests(self):
        self.create_and_test_config_to_dict()
"""

MODELING_COMMON = """
import random

from transformers import is_torch_available
from transformers.testing_utils import require_torch, torch_device

if is_torch_available():
    import torch

global_rng = random.Random()


def ids_tensor(shape, vocab_size, rng=None):
    rng = rng or global_rng
    count = 1
    for dim in shape:
        count *= dim
    values = [rng.randint(0, vocab_size - 1) for _ in range(count)]
    return torch.tensor(values, dtype=torch.long, device=torch_device).view(shape).contiguous()


class ModelTesterMixin:
    model_tester = None
    all_model_classes = ()

    def test_model_outputs_have_batch_dim(self):
        config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
        for model_class in self.all_model_classes:
            model = model_class(config).to(torch_device).eval()
            with torch.no_grad():
                self.assertEqual(model(**inputs)[0].shape[0], self.model_tester.batch_size)


class GenerationTesterMixin:
    all_generative_model_classes = ()
"""

CAUSAL_LM_TESTER = """
from inspect import signature

from .test_configuration_common import ConfigTester
from .test_modeling_common import (
    GenerationTesterMixin,
    ModelTesterMixin,
    ids_tensor,
    is_torch_available,
    require_torch,
    torch_device,
)

if is_torch_available():
    import torch


class CausalLMModelTester:
    base_model_class = None
    causal_lm_class = None
    sequence_classification_class = None
    # Passed to the config class even where its signature does not name them.
    forced_config_args = ["pad_token_id"]

    def __init__(
        self,
        parent,
        batch_size=13,
        seq_length=7,
        use_input_mask=True,
        vocab_size=99,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=37,
        hidden_act="gelu",
        max_position_embeddings=512,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    ):
        if self.base_model_class is None:
            raise ValueError("You have inherited from CausalLMModelTester but did not set base_model_class.")
        self.parent = parent
        self.batch_size = batch_size
        self.seq_length = seq_length
        self.use_input_mask = use_input_mask
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.max_position_embeddings = max_position_embeddings
        self.pad_token_id = pad_token_id
        self.bos_token_id = bos_token_id
        self.eos_token_id = eos_token_id
        self.head_dim = hidden_size // num_attention_heads

    @property
    def config_class(self):
        return self.base_model_class.config_class

    @property
    def all_model_classes(self):
        classes = (self.base_model_class, self.causal_lm_class, self.sequence_classification_class)
        return [cls for cls in classes if cls is not None]

    def get_config(self):
        names = [*signature(self.config_class.__init__).parameters, *self.forced_config_args]
        return self.config_class(**{name: getattr(self, name) for name in names if hasattr(self, name)})

    def prepare_config_and_inputs(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size)
        input_mask = torch.ones_like(input_ids) if self.use_input_mask else None
        return self.get_config(), input_ids, input_mask

    def prepare_config_and_inputs_for_common(self):
        config, input_ids, input_mask = self.prepare_config_and_inputs()
        return config, {"input_ids": input_ids, "attention_mask": input_mask}


@require_torch
class CausalLMModelTest(ModelTesterMixin, GenerationTesterMixin):
    model_tester_class = None

    def setUp(self):
        self.model_tester = self.model_tester_class(self)
        self.config_tester = ConfigTester(self, config_class=self.model_tester.config_class)
        self.all_model_classes = self.model_tester.all_model_classes

    def test_config(self):
        self.config_tester.run_common_tests()
"""

LLAMA_TEST = f'''
"""Testing suite for the PyTorch LLaMA model."""

import unittest

from transformers import is_torch_available
from transformers.testing_utils import require_torch, slow, torch_device

from ...causal_lm_tester import CausalLMModelTest, CausalLMModelTester


if is_torch_available():
    import torch

    from transformers import LlamaForCausalLM, LlamaModel


class LlamaModelTester(CausalLMModelTester):
    if is_torch_available():
        base_model_class = LlamaModel
        causal_lm_class = LlamaForCausalLM

    # No padding token: its sequence classifier is left to the caller's config.
    def __init__(self, parent, hidden_size={TESTER_HIDDEN_SIZE}, num_hidden_layers={TESTER_LAYERS}, pad_token_id=None):
        super().__init__(
            parent, hidden_size=hidden_size, num_hidden_layers=num_hidden_layers, pad_token_id=pad_token_id
        )


@require_torch
class LlamaModelTest(CausalLMModelTest, unittest.TestCase):
    model_tester_class = LlamaModelTester


@require_torch
class LlamaIntegrationTest(unittest.TestCase):
    @slow
    def test_llama_3_1_hard(self):
        self.skipTest("needs the released weights")
'''

FILES = {
    "tests/__init__.py": "",
    "tests/models/__init__.py": "",
    "tests/models/llama/__init__.py": "",
    "tests/test_configuration_common.py": CONFIGURATION_COMMON,
    "tests/test_modeling_common.py": MODELING_COMMON,
    "tests/causal_lm_tester.py": CAUSAL_LM_TESTER,
    "tests/models/llama/test_modeling_llama.py": LLAMA_TEST,
}


def make_tester_checkout(root: Path) -> Path:
    """Write the ``tests/`` tree of a transformers checkout under ``root`` and return ``root``."""
    for name, text in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    return root
