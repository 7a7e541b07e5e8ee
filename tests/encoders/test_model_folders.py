"""A model folder is recorded by a portable name and its revision, never by its path (issue 40): an
index built with `--model /some/folder` still searches after the folder moves (pointed at its new
place by --model-path NAME=PATH or env HYBRIDLAB_MODEL_PATHS) and after the index is copied to another
folder; its file names carry no machine path; another folder under the same name (another revision)
is refused. Uses the tiny random BERT of test_custom_models; nothing downloads."""

from __future__ import annotations

import json
import shutil

import pytest

from hybridlab import cli
from hybridlab.config import parse_model_paths, resolve_encoder_settings
from hybridlab.encoders import registry
from hybridlab.encoders.sentence_transformers import folder_sha256
from tests.encoders.test_custom_models import DOCS, pytestmark, save_tiny_model  # noqa: F401

QUERY = "vitamin D fractures"


def search(capsys, index, *extra: str) -> tuple[int, list[str], str]:
    capsys.readouterr()
    code = cli.main(
        ["search", QUERY, "--index", str(index), "--mode", "vector", "--limit", "3", "--json", *extra]
    )
    out, err = capsys.readouterr()
    return code, [hit["doc_id"] for hit in json.loads(out)] if code == 0 else [], err


@pytest.fixture
def built(tmp_path):
    """An index built with the tiny model given by its folder, under tmp_path/first/."""
    (tmp_path / "first").mkdir()
    model = save_tiny_model(tmp_path / "first" / "tiny-bert")
    data = tmp_path / "data"
    data.mkdir()
    (data / "corpus.jsonl").write_text(
        "".join(
            json.dumps({"_id": d, "title": title, "text": text}) + "\n" for d, (title, text) in DOCS.items()
        )
    )
    index = tmp_path / "first" / "index"
    assert cli.main(["index", str(data), "--index", str(index), "--model", model, "-q"]) == 0
    return {"model": model, "index": index, "data": data, "root": tmp_path}


def test_a_folder_model_is_recorded_by_its_name_and_revision(built):
    manifest = json.loads((built["index"] / "manifest.json").read_text())
    assert list(manifest["models"]) == ["tiny-bert"] and manifest["config"]["models"] == ["tiny-bert"]
    record = manifest["models"]["tiny-bert"]["encoder"]
    assert (record["name"], record["source"], record["location"]) == ("tiny-bert", "folder", built["model"])
    assert record["revision"] == folder_sha256(built["root"] / "first" / "tiny-bert")
    names = [path.name for path in built["index"].rglob("*")]
    assert "dense-tiny-bert.faiss" in " ".join(names)
    assert not [name for name in names if "first" in name or built["root"].name in name]  # no machine path


def test_the_index_searches_after_the_folder_moves_and_the_index_is_copied(built, capsys, monkeypatch):
    code, before, _ = search(capsys, built["index"])
    assert code == 0 and sorted(before) == ["d1", "d2", "d3"]
    moved = built["root"] / "moved" / "tiny-bert"
    moved.parent.mkdir()
    shutil.move(built["model"], moved)
    copy = built["root"] / "served" / "index"
    shutil.copytree(built["index"], copy)
    for index in (built["index"], copy):
        code, _, err = search(capsys, index)  # not found where it was: the message says how to point at it
        assert code == 2 and f"model folder 'tiny-bert' is not at {built['model']}" in err
        assert "--model-path tiny-bert=PATH" in err
        assert search(capsys, index, "--model-path", f"tiny-bert={moved}")[:2] == (0, before)
    code, _, err = search(capsys, copy, "--model-path", f"tiny-bert={built['root'] / 'nowhere'}")
    assert code == 2 and "model folder 'tiny-bert' is not at " in err and "no such folder" in err
    monkeypatch.setenv("HYBRIDLAB_MODEL_PATHS", f"other=/nowhere:tiny-bert={moved}")
    assert search(capsys, copy)[:2] == (0, before)
    monkeypatch.delenv("HYBRIDLAB_MODEL_PATHS")
    assert search(capsys, copy, "--embedding-model", str(moved))[:2] == (0, before)  # the folder by its path


def test_another_revision_under_the_same_name_is_refused(built, capsys):
    import torch
    from transformers import BertConfig, BertModel

    other = built["root"] / "other" / "tiny-bert"
    other.parent.mkdir()
    shutil.copytree(built["model"], other)
    torch.manual_seed(1)
    BertModel(BertConfig.from_pretrained(other)).save_pretrained(other)  # new weights, same name
    code, _, err = search(capsys, built["index"], "--model-path", f"tiny-bert={other}")
    assert code == 2 and "the query encoder of 'tiny-bert' does not match the encoder that built" in err
    assert "(differs in ['revision'])" in err


def test_model_paths_are_parsed_and_validated(tmp_path):
    assert parse_model_paths(f"a={tmp_path}:b.v2=~/m") == (
        ("a", str(tmp_path)),
        ("b.v2", str(tmp_path.home() / "m")),
    )
    assert parse_model_paths({"a": str(tmp_path)}) == (("a", str(tmp_path)),)
    assert resolve_encoder_settings({}, env={"HYBRIDLAB_MODEL_PATHS": f"a={tmp_path}"}).model_paths == (
        ("a", str(tmp_path)),
    )
    for bad in ("a", "a/b=/x", "=/x", "a="):
        with pytest.raises(ValueError, match="is not NAME=PATH"):
            parse_model_paths(bad)


def test_a_folder_named_like_a_registry_model_is_named_by_model_path(built, capsys):
    folder = built["root"] / "copies" / "all-MiniLM-L6-v2"  # e.g. a local copy of a preset
    shutil.copytree(built["model"], folder)
    with pytest.raises(ValueError, match="--model-path NAME="):
        registry.canonical_name(str(folder))
    assert registry.canonical_name("all-MiniLM-L6-v2") == "all-MiniLM-L6-v2"  # the preset, unchanged
    index = built["root"] / "named"
    assert (
        cli.main(
            [
                "index",
                str(built["data"]),
                "--index",
                str(index),
                "--model-path",
                f"mini-copy={folder}",
                "--model",
                "mini-copy",
                "-q",
            ]
        )
        == 0
    )
    manifest = json.loads((index / "manifest.json").read_text())
    assert list(manifest["models"]) == ["mini-copy"]
    assert manifest["models"]["mini-copy"]["encoder"]["location"] == str(folder)
    assert search(capsys, index, "--model-path", f"mini-copy={folder}")[0] == 0


def test_an_index_written_before_portable_names_still_meets_its_folder(tmp_path):
    """Before issue 40 an encoder record's `source` was the folder's path: the same folder, now
    recorded as "folder", meets it when the revision is the same; a path that is gone says so."""
    old = {"name": "/old/place/tiny-bert", "source": "/old/place/tiny-bert", "revision": "r1", "dim": 32}
    now = {
        "name": "tiny-bert",
        "source": "folder",
        "location": "/new/place/tiny-bert",
        "revision": "r1",
        "dim": 32,
    }
    assert registry.encoder_mismatch(old, now) == []
    assert registry.encoder_mismatch(old, {**now, "revision": "r2"}) == ["revision"]
    assert registry.encoder_mismatch({**old, "source": "BAAI/bge-base-en-v1.5"}, now) == ["source"]
    with pytest.raises(
        ValueError,
        match="does not exist .an index written before folders were recorded by revision records a folder",
    ):
        registry.canonical_name(str(tmp_path / "gone" / "tiny-bert"))
