"""The bundled editing model (assets/models/edit-gsm-dllm): it decodes with its own editing settings, and the
first example a newcomer runs on it shows an edit."""

from lopa.models import load
from lopa.models.loading import ASSETS
from lopa.resolution import settings_for_model


def test_the_editing_model_ships_its_editing_settings_and_the_first_example_edits():
    from app.serving.examples import check_answer, example_groups

    loaded = load(str(ASSETS / "models" / "edit-gsm-dllm"), device="cpu")
    settings = settings_for_model(loaded.spec)                     # what lopa generate and the page resolve
    assert (settings.tau_conf, settings.edit_threshold, settings.edit_post_steps) == (0.6, 0.7, 0)
    first = example_groups()[0][1][0]
    for k in (0, settings.k):                                      # D2F and the default LoPA
        run = loaded.decoder(settings.replace(k=k)).run(first)
        assert sum(len(r.edit_positions) for r in run.records) >= 1, k
        assert check_answer(first, run.text)[0]                     # and the answer is right
    # and the other bundled models never edit unless told
    for name in ("open-gsm-dllm", "sure-gsm-dllm"):
        assert settings_for_model(load(str(ASSETS / "models" / name), device="cpu").spec).edit_threshold == 1.0
