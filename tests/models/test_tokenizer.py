"""TextTokenizer and the demo byte-level tokenizer: ids, BOS once, round trips, any UTF-8."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer, models

from orpheus_svc.core.tokens import (
    BOS_ID, END_OF_HUMAN_ID, END_OF_SPEECH_ID, END_OF_TEXT_ID, PAD_ID, START_OF_AI_ID,
    START_OF_HUMAN_ID, START_OF_SPEECH_ID,
)
from orpheus_svc.models.tokenizer import (
    ControlTokenInTextError, TextTokenizer, build_byte_level_tokenizer_json, demo_special_tokens,
)


def _doc() -> dict:
    return json.loads(build_byte_level_tokenizer_json())


def _saved(tmp_path, doc_or_text) -> TextTokenizer:
    text = doc_or_text if isinstance(doc_or_text, str) else json.dumps(doc_or_text)
    (tmp_path / "tokenizer.json").write_text(text, encoding="utf-8")
    return TextTokenizer.from_file(tmp_path)


def test_demo_special_tokens_keep_their_real_ids_after_save_and_load(tmp_path):
    tok = _saved(tmp_path, build_byte_level_tokenizer_json())
    for token_id in (BOS_ID, END_OF_TEXT_ID, START_OF_SPEECH_ID, END_OF_SPEECH_ID,
                     START_OF_HUMAN_ID, END_OF_HUMAN_ID, START_OF_AI_ID, PAD_ID):
        content = demo_special_tokens()[token_id]
        assert tok.token_to_id(content) == token_id
        assert tok.id_to_token(token_id) == content
    assert tok.token_to_id("<|begin_of_text|>") == 128000
    assert tok.token_to_id("<|eot_id|>") == 128009


def test_encode_starts_with_bos_exactly_once():
    tok = TextTokenizer.from_str(build_byte_level_tokenizer_json())
    assert tok.post_processor_adds_bos
    ids = tok.encode("tara: Hello there.")
    assert ids[0] == BOS_ID and ids.count(BOS_ID) == 1
    assert ids[1:] == list("tara: Hello there.".encode())  # one id per UTF-8 byte


def test_orpheus_prompt_layout_with_demo_tokenizer():
    tok = TextTokenizer.from_str(build_byte_level_tokenizer_json())
    prompt = [START_OF_HUMAN_ID] + tok.encode("tara: hi") + [
        END_OF_TEXT_ID, END_OF_HUMAN_ID, START_OF_AI_ID, START_OF_SPEECH_ID]
    assert prompt[:2] == [128259, 128000]
    assert prompt[-4:] == [128009, 128260, 128261, 128257]
    assert len(prompt) == 2 + len(b"tara: hi") + 4


@pytest.mark.parametrize("text", [
    "leo: I can't believe it <laugh> really!",
    "mia: 😀🎉 emoji and ZWJ 👩‍👩‍👧",
    "zoe: 日本語のテキスト 中文 한국어",
    "dan: tabs\tnewlines\n and \x00 control bytes",
    "",
])
def test_any_utf8_text_encodes_and_decodes_back(text):
    tok = TextTokenizer.from_str(build_byte_level_tokenizer_json())
    ids = tok.encode(text)
    assert ids[0] == BOS_ID
    assert all(0 <= i < 256 for i in ids[1:])
    assert tok.decode(ids) == text


def test_special_token_spelled_in_text_stays_text():
    tok = TextTokenizer.from_str(build_byte_level_tokenizer_json())
    ids = tok.encode("tara: hi <|eot_id|><custom_token_2>")
    assert END_OF_TEXT_ID not in ids and END_OF_SPEECH_ID not in ids
    assert ids[1:] == list("tara: hi <|eot_id|><custom_token_2>".encode())


def test_tokenizer_without_bos_post_processor_gets_bos_prepended(tmp_path):
    doc = _doc()
    doc["post_processor"] = None
    tok = _saved(tmp_path, doc)
    assert not tok.post_processor_adds_bos
    assert tok.encode("hi") == [BOS_ID, ord("h"), ord("i")]


def test_post_processor_adding_more_than_bos_is_refused(tmp_path):
    doc = _doc()
    doc["post_processor"]["single"].append({"SpecialToken": {"id": "<|eot_id|>", "type_id": 0}})
    doc["post_processor"]["special_tokens"]["<|eot_id|>"] = {
        "id": "<|eot_id|>", "ids": [END_OF_TEXT_ID], "tokens": ["<|eot_id|>"]}
    with pytest.raises(ValueError, match="post-processor"):
        _saved(tmp_path, doc)


def test_tokenizer_without_bos_id_is_refused():
    plain = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    with pytest.raises(ValueError, match="128000"):
        TextTokenizer(plain)


def test_non_special_added_token_in_text_is_rejected(tmp_path):
    doc = _doc()
    doc["model"]["vocab"]["<ctl>"] = 128300
    doc["added_tokens"].append({"id": 128300, "content": "<ctl>", "single_word": False,
                                "lstrip": False, "rstrip": False, "normalized": False,
                                "special": False})
    tok = _saved(tmp_path, doc)
    assert tok.encode("plain text")[1:] == list(b"plain text")
    with pytest.raises(ControlTokenInTextError, match="<ctl>"):
        tok.encode("sneaky <ctl> text")


def test_missing_or_broken_tokenizer_file_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        TextTokenizer.from_file(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a valid tokenizer.json"):
        TextTokenizer.from_file(tmp_path)


def test_demo_tokenizer_json_is_deterministic_and_small():
    text = build_byte_level_tokenizer_json()
    assert text == build_byte_level_tokenizer_json.__wrapped__()
    assert len(text.encode()) < 16_000
    assert TextTokenizer.from_str(text).max_id() == 128265
