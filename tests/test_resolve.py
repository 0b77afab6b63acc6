"""The one resolution of settings (lopa.resolution.resolution): precedence, unset, sources."""

import pytest

from lopa.resolution import DEFAULT_K, resolution, resolve, settings_diff
from lopa.settings import PAPER_PRESETS, SETTINGS, DecodeSettings, ModelSpec

SPEC = ModelSpec(mask_token_id=1, eos_token_ids=(0,), logit_shift=True, block_size=16, attention="full",
                 decode={"tau_conf": 0.8})


def test_precedence_user_over_preset_over_model_over_surface_over_engine():
    settings, sources = resolution({"k": 2, "tau_conf": None}, SPEC, preset={"tau_add": 0.3, "k": 7},
                                   defaults={"k": 4, "max_new_tokens": 64, "tau_act": 0.9})
    assert settings.k == 2 and sources["k"] == "user"                   # user beats preset and surface
    assert settings.tau_add == 0.3 and sources["tau_add"] == "preset"
    assert settings.tau_conf == 0.8 and sources["tau_conf"] == "model"  # None is unset: the model's value
    assert settings.attention == "full" and settings.block_size == 16 and sources["block_size"] == "model"
    assert settings.tau_act == 0.9 and sources["tau_act"] == "surface"
    assert settings.temperature == SETTINGS["temperature"].default and sources["temperature"] == "engine"
    assert settings.max_new_tokens == 64


def test_preset_beats_the_model_and_names_resolve():
    settings = resolve({}, SPEC, preset="gsm8k")
    assert settings.tau_conf == PAPER_PRESETS["gsm8k"]["tau_conf"]      # the preset beats the model's 0.8
    assert settings.attention == "full"                                 # presets leave attention to the model
    with pytest.raises(ValueError, match="preset must be one of"):
        resolve({}, SPEC, preset="nope")


def test_decoder_overrides_come_last_and_unasked_lengths_round_to_blocks():
    settings, sources = resolution({"k": 8}, SPEC, decoder="d2f", defaults={"max_new_tokens": 40})
    assert settings.k == 0 and sources["k"] == "user"
    assert settings.max_new_tokens == 48                                # 40 rounded up to blocks of 16
    with pytest.raises(ValueError, match="multiple of block_size"):
        resolve({"max_new_tokens": 40}, SPEC)                           # what the user asked is never changed


def test_bad_values_fail_naming_the_setting_and_text_is_read_by_the_registry():
    assert resolve({"k": "3", "tau_conf": "0.5"}).k == 3
    with pytest.raises(ValueError, match=r"tau_conf must be in \(0, 1\]"):
        resolve({"tau_conf": float("nan")})
    with pytest.raises(ValueError, match="unknown setting"):
        resolve({"kk": 1})
    with pytest.raises(ValueError, match="k .lookahead branches. must be"):
        ModelSpec(mask_token_id=1, eos_token_ids=(0,), logit_shift=True, decode={"k": -1})


def test_settings_diff_reproduces_a_run_from_its_baseline():
    baseline = resolve({}, SPEC, defaults={"k": DEFAULT_K})
    run = resolve({"k": 1, "order": "random"}, SPEC, defaults={"k": DEFAULT_K})
    diff = settings_diff(run, baseline)
    assert diff == {"k": 1, "order": "random"}
    assert resolve(diff, SPEC, defaults={"k": DEFAULT_K}) == run
    assert settings_diff(DecodeSettings(), DecodeSettings()) == {}


def test_the_decoders_overrides_are_applied_one_way_and_resolve_is_the_package_s(monkeypatch):
    """resolve() applies a decoder's overrides through decoder_settings, the one place they are applied, so
    a decoder's settings are the same whichever way they are asked for; both are exported from `lopa`."""
    import lopa
    import lopa.resolution

    assert lopa.resolve is resolve and lopa.decoder_settings is lopa.resolution.decoder_settings
    asked = []
    real = lopa.resolution.decoder_settings
    monkeypatch.setattr(lopa.resolution, "decoder_settings", lambda *a, **k: asked.append(a[0]) or real(*a, **k))
    base = resolve({"k": 5, "block_size": 8, "max_new_tokens": 16})
    assert resolve(base.to_dict(), decoder="one_token") == real("one_token", base) and asked == ["lopa", "one_token"]
    with pytest.raises(ValueError, match="decoder must be one of"):
        resolve({}, decoder="nope")


def test_a_setting_s_message_is_public():
    """The CLI's flag reading (lopa.resolution) words its refusals with Setting.error, as Setting.parse does."""
    spec = SETTINGS["k"]
    assert str(spec.error("x", " (a number)")) == "k (lookahead branches) must be an integer in 0..32 (a number), got 'x'"
    with pytest.raises(ValueError) as err:
        spec.parse("x")
    assert str(err.value) == str(spec.error("x", " (a number)"))
