"""The model file: the GGUF header reader, ggml tables, ModelSpec, synthetic models."""
