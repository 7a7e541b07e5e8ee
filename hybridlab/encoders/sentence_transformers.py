"""A sentence-transformers model (torch, imported only when the encoder is built): the registry's
MiniLM, or any model given by local folder or hub id (`load_custom`).
See docs/internals/search.md#sentence-transformers."""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from hybridlab.encoders.base import Encoder, ModelSpec, package_model_path
from hybridlab.errors import InvalidValueError

__all__ = ["DEVICE_ENV", "SentenceTransformerEncoder", "folder_sha256", "load_custom", "resolve_device"]

logger = logging.getLogger(__name__)

DEVICE_ENV = "HYBRIDLAB_DEVICE"
HALF_DTYPES = ("float16", "bfloat16")  # GPU only (`hybridlab.config.DTYPES`)
# the files whose bytes make a model folder's vectors: weights, configs, tokenizer (not READMEs)
_HASHED_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".json", ".txt", ".model")
# alternative backends' exports inside a folder: not read by the torch backend
_SKIPPED_DIRS = ("onnx", "openvino", ".git", ".cache")
_GPU_DRIVER_PATHS = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/kfd", "/dev/dxg")


def resolve_device(device: str | None = None) -> str:
    """`device`, else env HYBRIDLAB_DEVICE, else "auto": cuda, then mps, then cpu ("cuda:1" etc. pass through)."""
    device = device or os.environ.get(DEVICE_ENV) or "auto"
    if device != "auto":
        return device
    if "torch" not in sys.modules and not _gpu_driver_present():
        return "cpu"  # no GPU driver: torch (~1 s to import) could find none
    import torch

    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"


def _gpu_driver_present() -> bool:
    """Whether torch could find a GPU here (an NVIDIA, ROCm or WSL GPU driver, or macOS's mps),
    told without importing torch."""
    return sys.platform == "darwin" or any(os.path.exists(path) for path in _GPU_DRIVER_PATHS)


def _devices(device: str | None) -> list[str]:
    """The devices of `device` (or env HYBRIDLAB_DEVICE), comma-separated, each resolved."""
    return [resolve_device(d.strip()) for d in (device or os.environ.get(DEVICE_ENV) or "auto").split(",")]


class SentenceTransformerEncoder(Encoder):
    """A sentence-transformers model on `resolve_device(device)`; `model` = one already loaded. With
    several devices the model loads on the first, and a multi-process pool over all of them (started
    at the first batch, stopped at exit) encodes."""

    def __init__(self, spec: ModelSpec, model: Any = None, device: str | None = None):
        super().__init__(spec)
        devices = _devices(device)
        self.devices, self.pool = devices if len(devices) > 1 else [], None
        if model is None:
            from sentence_transformers import SentenceTransformer

            source = spec.source or str(package_model_path(spec.package))
            device = devices[0]
            if spec.dtype in HALF_DTYPES and device.split(":")[0] == "cpu":
                raise InvalidValueError(
                    f"dtype {spec.dtype} of {spec.name!r} needs a GPU (device is {device}): use fp32 on "
                    "the CPU (fp16 vectors made on a GPU meet fp32 queries; bf16 ones do not)"
                )
            model = SentenceTransformer(source, device=device)
            if spec.max_seq_length:
                model.max_seq_length = spec.max_seq_length
            if spec.dtype in HALF_DTYPES:
                import torch

                model = model.to(dtype=getattr(torch, spec.dtype))
        self.model = model

    def encode_batch(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        prefix = self.prefix(is_query=is_query)
        if self.devices and self.pool is None:
            self.pool = self.model.start_multi_process_pool(self.devices)
            atexit.register(self.close)
        return self.model.encode(
            [prefix + t for t in texts],
            batch_size=max(len(texts), 1),
            convert_to_numpy=True,
            normalize_embeddings=False,
            show_progress_bar=False,
            **({"pool": self.pool} if self.pool else {}),
        )

    def close(self) -> None:
        """Stop the multi-process pool of several devices, if started (again at exit: a no-op)."""
        pool, self.pool = self.pool, None
        if pool is not None:
            self.model.stop_multi_process_pool(pool)


def folder_sha256(folder: Path) -> str:
    """sha256 over the relative names and bytes of a model folder's weight, config and tokenizer files."""
    digest = hashlib.sha256()
    files = sorted(
        p
        for p in folder.rglob("*")
        if p.is_file()
        and p.suffix in _HASHED_SUFFIXES
        and not any(part in _SKIPPED_DIRS for part in p.relative_to(folder).parts[:-1])
    )
    for path in files:
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def _hub_revision(repo_id: str) -> str:
    """The commit of a hub model's cached snapshot (its folder name), or "" when not found."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return ""
    for name in ("modules.json", "config.json"):
        found = try_to_load_from_cache(repo_id, name)
        if isinstance(found, str):
            parent = Path(found).parent
            if parent.parent.name == "snapshots":
                return parent.name
    return ""


def _prompt(prompts: dict[str, str], *names: str) -> str:
    return next((prompts[n] for n in names if prompts.get(n)), "")


def load_custom(
    name: str, source: str, *, is_folder: bool, device: str | None = None
) -> SentenceTransformerEncoder:
    """Load a sentence-transformers model that is not in the registry and build its spec from it.

    `source` is an absolute folder or a hub id (sentence-transformers downloads it into its own
    cache when online, and reads only the cache when HF_HUB_OFFLINE=1). Dimension, prompts
    (`config_sentence_transformers.json`: "query"; "document" or "passage"), max_seq_length,
    pooling and dtype come from the loaded model; the vectors are L2-normalised by the Encoder.
    """
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(source, device=_devices(device)[0])
    get_dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    dim = get_dim()
    if not dim:
        raise InvalidValueError(f"model {source!r} does not report its embedding dimension")
    prompts = dict(getattr(model, "prompts", None) or {})
    poolings = [getattr(m, "pooling_mode", None) for m in model.children()]
    pooling = next((p if isinstance(p, str) else "+".join(p) for p in poolings if p), "")
    if any(type(m).__name__ == "Normalize" for m in model.children()):
        pooling = f"{pooling}+normalize" if pooling else "normalize"
    dtype = str(getattr(model, "dtype", "float32") or "float32").replace("torch.", "")
    spec = ModelSpec(
        name,
        "",
        int(dim),
        int(model.max_seq_length or 0),
        "sentence-transformers",
        query_prefix=_prompt(prompts, "query"),
        document_prefix=_prompt(prompts, "document", "passage", "corpus"),
        description=f"sentence-transformers model from {'folder' if is_folder else 'the hub'} {source}",
        source=source,
        revision=folder_sha256(Path(source)) if is_folder else _hub_revision(source),
        pooling=pooling,
        dtype=dtype,
    )
    logger.info(
        "loaded sentence-transformers model %s (%d-d, %s, on %s)", source, spec.dim, pooling, model.device
    )
    return SentenceTransformerEncoder(spec, model=model, device=device)
