"""Extensions of onnx_core: the gradient rules."""
