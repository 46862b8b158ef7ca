"""Vision, detection and segmentation classes a release diff selects: each builds the way its parent model uses it
and runs eagerly on its sample inputs (issue 53)."""

from __future__ import annotations

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
