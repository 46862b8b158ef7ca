"""hfexport: an export gate for transformers modeling code (torch.export, ONNX, ExecuTorch)."""

__version__ = "0.1.0"
