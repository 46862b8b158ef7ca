"""Vision, detection and segmentation classes a release diff selects: each builds the way its parent model uses it
and runs eagerly on its sample inputs (issue 53)."""

from __future__ import annotations

import importlib

import pytest
import torch

from hfexport.tiny_models import sample_inputs, tiny_model


@pytest.mark.parametrize(
    "name",
    [
        # The pointmap head also builds its scale branch (scale_conv_out_channels).
        "Sapiens2ForPointmapEstimation",
        *(
            pytest.param(name, marks=pytest.mark.slow)
            for name in (
                "Sapiens2ForImageMatting",
                "Sapiens2ForNormalEstimation",
                "Sapiens2ForPoseEstimation",
                "Sapiens2ForSemanticSegmentation",
            )
        ),
    ],
)
def test_sapiens2_task_heads_build_their_decode_head(name: str) -> None:
    # Their head config leaves the upsampling and refinement convs to checkpoints: "'NoneType' object is not
    # subscriptable" on building.
    model = tiny_model(name)
    pixels = sample_inputs(model)["pixel_values"]
    with torch.no_grad():
        output = model(pixel_values=pixels)
    assert output[0].shape[0] == pixels.shape[0]


@pytest.mark.parametrize(
    "name", ["DetrForSegmentation", pytest.param("ConditionalDetrForSegmentation", marks=pytest.mark.slow)]
)
def test_detr_segmentation_heads_fuse_the_backbone_stages(name: str) -> None:
    # The mask head fuses the backbone's first three stages: the ResNet standing in for timm's output the last one
    # only ("list index out of range"), and d_model + heads channels must divide by 8 ("got 36").
    model = tiny_model(name)
    assert len(model.config.backbone_config.out_indices) == 4
    inputs = sample_inputs(model)
    with torch.no_grad():
        output = model(**inputs)
    assert output.pred_masks.shape[:2] == (2, model.config.num_queries)


@pytest.mark.parametrize(
    "name",
    ["BeitForSemanticSegmentation", pytest.param("Data2VecVisionForSemanticSegmentation", marks=pytest.mark.slow)],
)
def test_beit_segmentation_heads_read_four_layers(name: str) -> None:
    # Their head reads four distinct layers' states: two layers refused to build ("requires config.out_indices to be a
    # list of 4 integers").
    model = tiny_model(name)
    pixels = sample_inputs(model)["pixel_values"]
    with torch.no_grad():
        logits = model(pixel_values=pixels).logits
    assert logits.shape[:2] == (2, model.config.num_labels)


@pytest.mark.parametrize(
    "name",
    [
        # Mask queries in the last num_blocks layers: 4 of 2 never joined ("expected input ... to have 32 channels").
        "EomtForUniversalSegmentation",
        pytest.param("EomtDinov3ForUniversalSegmentation", marks=pytest.mark.slow),
        # The decoder reads the tower's layers 3, 6 and 9 of 2 ("tuple index out of range").
        "CLIPSegForImageSegmentation",
        # The MAE decoder's sizes are left to checkpoints ("found element of type NoneType").
        "HieraForPreTraining",
        # The decoder reads layers 5, 11, 17 and 23 of 2 ("torch.cat(): expected a non-empty list of Tensors").
        "SegGptForImageSegmentation",
        # The depth head reassembles four backbone layers and their class tokens ("'NoneType' object is not iterable").
        "CHMv2ForDepthEstimation",
    ],
)
def test_a_head_reads_only_layers_and_sizes_its_tiny_config_has(name: str) -> None:
    model = tiny_model(name)
    inputs = sample_inputs(model)
    with torch.no_grad():
        output = model(**inputs)
    assert all(value.isfinite().all() for value in output.values() if isinstance(value, torch.Tensor))


@pytest.mark.parametrize(
    ("name", "pixels"),
    [
        # A pair of images per sample (was "Input must be a 5D tensor").
        ("SuperGlueForKeypointMatching", (2, 2, 3, 32, 32)),
        # The image and its trimap, with stride-16 patches the fusion blocks upsample onto the stride-8 detail map
        # (was "Sizes of tensors must match").
        ("VitMatteForImageMatting", (2, 4, 32, 32)),
        # NLVR2's pair of images, each its own modality type (was "negative dimension -32": num_images -1).
        ("ViltForImagesAndTextClassification", (2, 2, 3, 32, 32)),
        # X-CLIP's vision tower reads its model's clips with the frames flattened into the batch (was "too many
        # values to unpack").
        ("XCLIPVisionModel", (8, 3, 32, 32)),
    ],
)
def test_an_image_model_reads_images_as_its_processor_or_model_shapes_them(name: str, pixels: tuple[int, ...]) -> None:
    model = tiny_model(name)
    inputs = sample_inputs(model)
    assert tuple(inputs["pixel_values"].shape) == pixels
    with torch.no_grad():
        output = model(**inputs)
    assert all(value.isfinite().all() for value in output.values() if isinstance(value, torch.Tensor))


def test_a_sub_module_its_parent_builds_on_a_sub_config_gets_that_sub_config() -> None:
    # UVDocBackbone, built on UVDocConfig's backbone_config, hands all of it to UVDocBridge(config), whose config_class
    # is the composite UVDocConfig: built from that it lacked the stages ("no attribute 'stage_configs'").
    from transformers.models.uvdoc.configuration_uvdoc import UVDocBackboneConfig

    model = tiny_model("UVDocBridge")
    assert type(model.config) is UVDocBackboneConfig
    inputs = sample_inputs(model)
    with torch.no_grad():
        assert model(**inputs).last_hidden_state.shape[:2] == inputs["hidden_states"].shape[:2]


def _module_class(module: str, name: str) -> type:
    # Sub-module classes the gate selects that transformers does not export at its top level.
    return getattr(importlib.import_module(f"transformers.models.{module}.modeling_{module}"), name)


@pytest.mark.parametrize(
    ("module", "name", "extra"),
    [
        # ViT encoders rotate their patch tokens by the angles their model computes ("cannot unpack non-iterable
        # NoneType object"): the class and register tokens, then the patch grid.
        ("dinov3_vit", "DINOv3ViTEncoder", "position_embeddings"),
        pytest.param("sapiens2", "Sapiens2Encoder", "position_embeddings", marks=pytest.mark.slow),
        # DAB-DETR's stacks require their model's padding masks of the image features; its decoder reads anchor boxes
        # (query_dim logits) as query position embeddings.
        pytest.param("dab_detr", "DabDetrEncoder", "attention_mask", marks=pytest.mark.slow),
        ("dab_detr", "DabDetrDecoder", "memory_key_padding_mask"),
        # LW-DETR's ViT reads its patch grid cut into windows stacked in the batch ("shape '[0, 28, 32]' is invalid").
        ("lw_detr", "LwDetrViTEncoder", "hidden_states"),
        # Florence-2's DaViT is called with its model's images (was "missing ... 'hidden_states'", then a 1 x 7 map).
        ("florence2", "Florence2VisionBackbone", "hidden_states"),
        # Grounding DINO's encoders fuse the image features with the text's ("missing 3 required positional
        # arguments: 'vision_features', ...").
        ("grounding_dino", "GroundingDinoEncoder", "text_features"),
        pytest.param("mm_grounding_dino", "MMGroundingDinoEncoder", "text_features", marks=pytest.mark.slow),
        # Swin's encoder reads the patch embeddings and the grid's (height, width) ("missing ... 'input_dimensions'").
        ("swin", "SwinEncoder", "input_dimensions"),
        # OmDet-Turbo's decoder reads its encoder's levels and the prompts' embeddings ("missing 4 required positional
        # arguments: 'vision_features', ...").
        ("omdet_turbo", "OmDetTurboDecoder", "task_features"),
    ],
)
def test_a_stack_built_alone_gets_what_its_model_computes_for_it(module: str, name: str, extra: str) -> None:
    model = tiny_model(_module_class(module, name))
    inputs = sample_inputs(model)
    assert extra in inputs
    with torch.no_grad():
        output = model(**inputs)
    assert all(value.isfinite().all() for value in output.values() if isinstance(value, torch.Tensor))


@pytest.mark.parametrize(
    "name",
    [
        # The DINOv3 variants' conv encoder reads the ViT's hidden_size (was "HGNetV2Config has no hidden_size").
        "Deimv2DINOv3ConvEncoder",
        # The lite encoder projects two backbone levels itself (was "expected input[2, 256, 8, 8] to have 512
        # channels").
        pytest.param("Deimv2LiteEncoder", marks=pytest.mark.slow),
    ],
)
def test_deimv2_encoders_build_with_the_variant_config_that_uses_them(name: str) -> None:
    model = tiny_model(_module_class("deimv2", name))
    inputs = sample_inputs(model)
    with torch.no_grad():
        output = model(**inputs)
    maps = output if isinstance(output, list) else output.feature_maps
    assert all(feature_map.shape[0] == 2 for feature_map in maps)


def test_perceiver_optical_flow_reads_patched_frame_pairs_at_its_training_size() -> None:
    # Two frames of 3 x 3 RGB patches (27 channels) at train_size, the flow field its decoder outputs; its patches and
    # their Fourier features (322 wide) need one cross-attention head (was "qk_channels (322) must be divisible").
    model = tiny_model("PerceiverForOpticalFlow")
    inputs = sample_inputs(model)
    assert tuple(inputs["inputs"].shape) == (2, 2, 27, *model.config.train_size)
    with torch.no_grad():
        assert model(**inputs).logits.shape == (2, *model.config.train_size, 2)
