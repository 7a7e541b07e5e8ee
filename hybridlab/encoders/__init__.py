"""Encoder backends that need more than a few lines; the registry and `load_encoder` are in `hybridlab.encoders.registry`."""
