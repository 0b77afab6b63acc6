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


def test_the_page_s_first_example_edits_on_the_editing_model_as_the_page_decodes_it():
    """As the page runs it: the prompt box's first example (app.serving.models.example_prompts), the settings the page
    resolves for the model (shown_settings: the app's k and max_new_tokens over the model's own values), LoPA and
    Compare's "D2F vanilla" side; each makes at least one edit, so a newcomer's first Run on the model shows one."""
    import torch

    from app.panels.compare import baseline_settings
    from app.serving.models import example_prompts
    from app.serving.request import shown_settings

    torch.set_num_threads(1)
    loaded = load(str(ASSETS / "models" / "edit-gsm-dllm"), device="cpu")
    page = shown_settings(loaded.spec)
    assert page.edit_threshold == 0.7 and page.k > 0
    first = example_prompts()[0]
    vanilla = baseline_settings("D2F vanilla (k = 0)", page)
    assert vanilla.k == 0 and vanilla.edit_threshold == 0.7
    for settings in (page, vanilla):
        run = loaded.decoder(settings).run(first)
        assert sum(len(r.edit_positions) for r in run.records) >= 1, settings
