"""orpheus_svc/files.py: a mapping read from a JSON or YAML file; failures are the caller's."""

from __future__ import annotations

import re

import pytest

from orpheus_svc.config import ConfigError, load_config
from orpheus_svc.core.voices import VoiceRegistryError
from orpheus_svc.engine.trtllm.manifest import MANIFEST_NAME, ManifestError, read_manifest
from orpheus_svc.files import read_mapping
from orpheus_svc.models.llama_config import LlamaSpec
from orpheus_svc.models.voices import read_voices_file


class Bad(ValueError):
    pass


def test_a_json_object_is_returned(tmp_path):
    (tmp_path / "a.json").write_text('{"x": [1, 2], "é": "ü"}', encoding="utf-8")
    assert read_mapping(tmp_path / "a.json", Bad) == {"x": [1, 2], "é": "ü"}


def test_every_failure_is_the_callers_error_naming_the_file(tmp_path):
    path = tmp_path / "a.json"
    at = re.escape(str(path))
    with pytest.raises(Bad, match=rf"^thing {at}: cannot read \(No such file or directory\)$"):
        read_mapping(path, Bad, what="thing")
    path.write_text("{broken")
    with pytest.raises(Bad, match=rf"^{at}: not valid JSON: Expecting property name"):
        read_mapping(path, Bad)
    path.write_bytes(b'{"x": "\xff"}')
    with pytest.raises(Bad, match=rf"^{at}: not valid JSON: 'utf-8' codec can't decode"):
        read_mapping(path, Bad)
    path.write_text("[1, 2]")
    with pytest.raises(Bad, match=rf"^{at}: expected a list of lists$"):
        read_mapping(path, Bad, expected="a list of lists")
    path.write_text("")
    with pytest.raises(Bad, match="not valid JSON"):
        read_mapping(path, Bad)
    with pytest.raises(Bad, match="cannot read"):
        read_mapping(tmp_path, Bad)  # a directory


def test_a_missing_file_can_raise_another_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="cannot read"):
        read_mapping(tmp_path / "nope.json", Bad, missing=FileNotFoundError)
    (tmp_path / "a.json").write_text("3")
    with pytest.raises(Bad):  # only a missing file
        read_mapping(tmp_path / "a.json", Bad, missing=FileNotFoundError)


def test_yaml_empty_is_an_empty_mapping_and_a_list_is_refused(tmp_path):
    path = tmp_path / "c.yaml"
    at = re.escape(str(path))
    path.write_text("")
    assert read_mapping(path, Bad, syntax="YAML") == {}
    path.write_text("engine:\n  max_batch_size: 4\n")
    assert read_mapping(path, Bad, syntax="YAML") == {"engine": {"max_batch_size": 4}}
    path.write_text("- a\n- b\n")
    with pytest.raises(Bad, match=rf"^{at}: expected a mapping$"):
        read_mapping(path, Bad, syntax="YAML", expected="a mapping")
    path.write_text("a: [\n")
    with pytest.raises(Bad, match=rf"^{at}: not valid YAML: "):
        read_mapping(path, Bad, syntax="YAML")


def test_the_callers_keep_their_error_classes(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"config\.json: cannot read"):
        LlamaSpec.from_file(tmp_path)
    (tmp_path / "config.json").write_text("[]")
    with pytest.raises(ValueError, match=r"config\.json: expected a JSON object"):
        LlamaSpec.from_file(tmp_path)
    (tmp_path / "voices.json").write_text("[]")
    with pytest.raises(VoiceRegistryError,
                       match='voices.json: expected a JSON object with a "voices" list'):
        read_voices_file(tmp_path / "voices.json")
    (tmp_path / MANIFEST_NAME).write_text('"tensorrt-engine"')
    with pytest.raises(ManifestError, match=rf"{MANIFEST_NAME}: expected a JSON object$"):
        read_manifest(tmp_path)
    (tmp_path / "c.yaml").write_text("- engine\n")
    with pytest.raises(ConfigError,
                       match=r"config file \S+c\.yaml: expected a mapping of sections"):
        load_config(tmp_path / "c.yaml", environ={})
    (tmp_path / "c.yaml").write_text("")
    assert load_config(tmp_path / "c.yaml", environ={}) == load_config(environ={})
