import pytest

from lopa.train.tokenizer import EOS, MASK, PAD, build_tokenizer, save_tokenizer, training_texts


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    from transformers import AutoTokenizer

    out = tmp_path_factory.mktemp("tok")
    save_tokenizer(build_tokenizer(training_texts(n_synthetic=1000), vocab_size=600), out)
    return AutoTokenizer.from_pretrained(str(out))


def test_special_tokens(tok):
    assert (tok.eos_token, tok.mask_token, tok.pad_token) == (EOS, MASK, PAD)
    ids = {tok.eos_token_id, tok.mask_token_id, tok.pad_token_id}
    assert ids == {0, 1, 2}
    assert tok(f"a{MASK}b")["input_ids"].count(tok.mask_token_id) == 1


def test_digits_are_single_tokens(tok):
    pieces = tok.convert_ids_to_tokens(tok("Tom has 123 apples. <<12+7=19>>19")["input_ids"])
    digit_pieces = [p for p in pieces if any(c.isdigit() for c in p)]
    assert digit_pieces and all(len(p) == 1 for p in digit_pieces)
    assert "".join(digit_pieces) == "1231271919"


def test_round_trip_and_small_vocab(tok):
    text = "Question: Anna has 23 pencils.\nAnswer: Anna now has <<23+4=27>>27 pencils.\n#### 27"
    assert tok.decode(tok(text)["input_ids"]) == text
    assert len(tok) <= 2048
