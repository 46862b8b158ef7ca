"""The dynamo room: workarounds torch.export itself needs (key ``"dynamo"``), installed around every backend's trace.

``model_patches`` (one model's code), ``patches`` (torch and transformers code many models share), ``dims`` (static
and multiple-of dims declarations, stage 4), ``program_fixes`` (stage 6), and the speed-ups that change no program:
``fast_tracing`` (every trace) and ``fast_loading`` (``torch.export.load``). Importing the room registers them all.
"""

# This order registers each kind's workarounds in the order they are installed or applied.
# isort: off
from . import model_patches, patches, dims, program_fixes, fast_loading, fast_tracing  # noqa: F401 - registers them
# isort: on
