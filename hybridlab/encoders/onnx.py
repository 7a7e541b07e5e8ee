"""ONNX Runtime encoders for a sentence-transformers BERT model (MiniLM), fp32 or int8.
See docs/internals/search.md#onnx-encoders."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hybridlab.encoders.base import (
    Encoder,
    ModelSpec,
    check_texts,
    l2_normalize,
    package_model_path,
    progress_bar,
)
from hybridlab.errors import InvalidValueError, ModelNotInstalledError
from hybridlab.extras import extra_for
from hybridlab.filelock import exclusive_lock

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
OPSET = 17
#: texts tokenized at once by `encode_documents`, then batched by their token counts
TOKENIZE_WINDOW = 4096
INTRA_OP_THREADS = min(len(os.sched_getaffinity(0)), 8)  # the machine's cores (onnxruntime's own default too)
_BUILD_PACKAGES = ("torch", "transformers", "onnx", "onnxscript", "onnxruntime")


def cache_root() -> Path:
    """`$HYBRIDLAB_MODEL_CACHE`, else `~/.cache/hybridlab/models`."""
    env = os.environ.get("HYBRIDLAB_MODEL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "hybridlab" / "models"


def recipe(spec: ModelSpec) -> dict:
    """What the built file depends on; a cached folder with another recipe is rebuilt."""
    quantize = spec.name.endswith("-int8")
    return {
        "format_version": FORMAT_VERSION,
        "source_package": spec.package,
        "source_version": importlib.metadata.version(spec.package),
        "max_seq_length": spec.max_seq_length,
        "dim": spec.dim,
        "opset": OPSET,
        "pooling": "mean, L2-normalised, in graph",
        "fusion": None
        if quantize
        else {"method": "onnxruntime.transformers optimize_model", "model_type": "bert", "opt_level": 1},
        "quantization": (
            {
                "method": "onnxruntime quantize_dynamic",
                "op_types": ["MatMul"],
                "per_channel": True,
                "weight_type": "QInt8",
                "pre_process": "quant_pre_process(skip_symbolic_shape=True)",
            }
            if quantize
            else None
        ),
    }


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _is_valid(folder: Path, spec: ModelSpec) -> bool:
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
        return manifest["recipe"] == recipe(spec) and manifest["sha256"] == _sha256(folder / "model.onnx")
    except (OSError, ValueError, KeyError):
        return False


def ensure_model(spec: ModelSpec) -> Path:
    """The cached folder of `spec`'s ONNX model, built first when missing or stale."""
    folder = cache_root() / spec.name
    if _is_valid(folder, spec):
        return folder
    with exclusive_lock(cache_root() / f".{spec.name}.lock"):  # blocking: wait for another builder
        if _is_valid(folder, spec):  # another process built it while we waited
            return folder
        staging = Path(tempfile.mkdtemp(prefix=f".{spec.name}.", dir=cache_root()))
        os.chmod(staging, 0o755)
        try:
            build(spec, staging)
            if folder.exists():
                stale = folder.with_name(f".{spec.name}.stale-{os.getpid()}")
                os.rename(folder, stale)
                shutil.rmtree(stale, ignore_errors=True)
            os.rename(staging, folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return folder


def _require_build_packages(spec: ModelSpec) -> None:
    """ModelNotInstalledError naming the extra to install when a package the export needs is missing."""
    for package in _BUILD_PACKAGES:
        try:
            importlib.metadata.distribution(package)
        except importlib.metadata.PackageNotFoundError:
            raise ModelNotInstalledError(spec.name, package, extra_for(package)) from None


def _mean_pooled(transformer: Any) -> Any:
    """`transformer` as a torch module that returns its L2-normalised mean-pooled sentence embedding
    (the mean of the token states under the attention mask)."""
    import torch

    class MeanPooled(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            hidden = self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=1)

    return MeanPooled(transformer)


def _export_fp32(spec: ModelSpec, transformer: Any, folder: Path) -> Path:
    """Trace the mean-pooled `transformer` on a sample batch and export it as `model_fp32.onnx` in
    `folder` (dynamic batch and sequence axes); its path."""
    import torch

    tokenizer = load_tokenizer(folder / "tokenizer.json", spec.max_seq_length)
    ids, mask, types = (torch.from_numpy(a) for a in feeds(tokenizer.encode_batch(["a b c", "d"])).values())
    fp32 = folder / "model_fp32.onnx"
    axes = {0: "batch", 1: "sequence"}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about data-dependent shapes; axes are dynamic
        torch.onnx.export(
            _mean_pooled(transformer),
            (ids, mask, types),
            str(fp32),
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["sentence_embedding"],
            dynamic_axes={
                "input_ids": axes,
                "attention_mask": axes,
                "token_type_ids": axes,
                "sentence_embedding": {0: "batch"},
            },
            opset_version=OPSET,
            dynamo=False,
        )
    return fp32


def _optimized(fp32: Path, model: Path, config: Any) -> None:
    """Write `fp32` with ONNX Runtime's BERT graph fusions (level 1) to `model`; `fp32` removed."""
    from onnxruntime.transformers.optimizer import optimize_model

    fused = optimize_model(
        str(fp32),
        model_type="bert",
        num_heads=config.num_attention_heads,
        hidden_size=config.hidden_size,
        opt_level=1,
    )
    fused.save_model_to_file(str(model))
    fp32.unlink()


def _quantized(fp32: Path, model: Path, folder: Path) -> None:
    """Write `fp32` dynamically quantised to int8 (per-channel MatMul weights) to `model`, after
    ONNX Runtime's pre-processing; `fp32` and the pre-processed file removed."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    prepared = folder / "model_prepared.onnx"
    quant_pre_process(str(fp32), str(prepared), skip_symbolic_shape=True)
    quantize_dynamic(
        str(prepared),
        str(model),
        op_types_to_quantize=["MatMul"],
        per_channel=True,
        weight_type=QuantType.QInt8,
    )
    fp32.unlink()
    prepared.unlink()


def build(spec: ModelSpec, folder: Path) -> None:
    """Export (and for `-int8` quantise) `spec`'s model into `folder` with its tokenizer and manifest."""
    _require_build_packages(spec)
    import torch  # noqa: F401 - the export's heavy imports, loaded before the first log line
    import transformers

    logger.info("building ONNX model %s in %s (once; cached)", spec.name, folder)
    source = package_model_path(spec.package)
    shutil.copyfile(source / "tokenizer.json", folder / "tokenizer.json")
    transformer = transformers.AutoModel.from_pretrained(str(source), attn_implementation="eager").eval()
    fp32 = _export_fp32(spec, transformer, folder)
    model = folder / "model.onnx"
    if recipe(spec)["quantization"] is None:
        _optimized(fp32, model, transformer.config)
    else:
        _quantized(fp32, model, folder)
    versions = {p: importlib.metadata.version(p) for p in _BUILD_PACKAGES}
    manifest = {
        "name": spec.name,
        "recipe": recipe(spec),
        "versions": versions,
        "file": model.name,
        "sha256": _sha256(model),
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


def load_tokenizer(path: Path, max_length: int) -> Any:
    """A `tokenizers.Tokenizer` cutting at `max_length` tokens and padding to the batch's longest
    (whatever fixed padding the file asks for: MiniLM's tokenizer.json pads to 128)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.enable_truncation(max_length=max_length)
    tokenizer.enable_padding(pad_id=0, pad_type_id=0, pad_token="[PAD]")
    return tokenizer


def feeds(encodings: Sequence[Any]) -> dict[str, np.ndarray]:
    """The BERT inputs (`input_ids`, `attention_mask`, `token_type_ids`) of `encodings`, right-padded
    with 0 to the longest."""
    width = max(len(e.ids) for e in encodings)
    ids, mask, types = (np.zeros((len(encodings), width), dtype=np.int64) for _ in range(3))
    for row, encoding in enumerate(encodings):
        n = len(encoding.ids)
        ids[row, :n], mask[row, :n], types[row, :n] = encoding.ids, encoding.attention_mask, encoding.type_ids
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def cpu_session(model: Path) -> Any:
    """An onnxruntime CPU session with the project's thread settings (the machine's cores, no spinning)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = INTRA_OP_THREADS
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])


class OnnxEncoder(Encoder):
    """A cached ONNX model run by onnxruntime on the CPU (2 intra-op threads, no spinning)."""

    #: small batches run faster on a CPU (activations stay in cache): SciFact documents on 2 cores,
    #: 56 docs/s at 2-4 texts per call against 52 at 32 (tokens sorted; bench.build_speed --command)
    batch_size = 4

    def __init__(self, spec: ModelSpec):
        super().__init__(spec)
        self.folder = ensure_model(spec)
        self.tokenizer = load_tokenizer(self.folder / "tokenizer.json", spec.max_seq_length)
        self._unpadded = load_tokenizer(self.folder / "tokenizer.json", spec.max_seq_length)
        self._unpadded.no_padding()
        self.session = cpu_session(self.folder / "model.onnx")

    def encode_batch(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        prefix = self.prefix(is_query=is_query)
        return self._run(self.tokenizer.encode_batch([prefix + t for t in texts]))

    def _run(self, encodings: Sequence[Any]) -> np.ndarray:
        return self.session.run(["sentence_embedding"], feeds(encodings))[0]

    def encode_documents(
        self,
        texts: Sequence[str],
        *,
        batch_size: int | None = None,
        show_progress: bool = False,
        sort_by_length: bool = True,
    ) -> np.ndarray:
        """As :meth:`Encoder.encode_documents`, with batches formed by token count: each window of
        `TOKENIZE_WINDOW` texts is tokenized once (unpadded), sorted longest first and cut into
        batches that pad only to their own longest (~2% padding on SciFact, 5% sorted by characters)."""
        texts = check_texts(texts)
        batch_size = self.batch_size if batch_size is None else batch_size
        if batch_size < 1:
            raise InvalidValueError(f"batch_size must be >= 1, got {batch_size}", field="batch_size")
        prefix = self.prefix(is_query=False)
        out = np.zeros((len(texts), self.spec.dim), dtype=np.float32)
        with progress_bar(len(texts), show_progress, self.spec.name) as progress:
            for start in range(0, len(texts), TOKENIZE_WINDOW):
                encodings = self._unpadded.encode_batch(
                    [prefix + t for t in texts[start : start + TOKENIZE_WINDOW]]
                )
                order = list(range(len(encodings)))
                if sort_by_length:
                    order.sort(key=lambda i: -len(encodings[i].ids))
                for first in range(0, len(order), batch_size):
                    rows = order[first : first + batch_size]
                    out[[start + i for i in rows]] = self._run([encodings[i] for i in rows])
                    progress.update(len(rows))
        return l2_normalize(out)
