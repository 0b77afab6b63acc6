"""DiffusionGemma on its own sampler: lopa.models.diffusion_gemma.decode returns the tokens
transformers' own `generate` returns at the same seed (a tiny random model built from the stock
config classes), and records every denoising step in a trace the schema validates."""

import json

import pytest
import torch

from lopa.models import load
from lopa.models.canvas_trace import CanvasRun, settled_step
from lopa.models.diffusion_gemma import decode, entropy_bound_accept, linear_temperature, token_entropy
from lopa.models.tiny import DIFFUSION_GEMMA_CANVAS, DIFFUSION_GEMMA_VOCAB, tiny_diffusion_gemma

VOCAB, CANVAS = DIFFUSION_GEMMA_VOCAB, DIFFUSION_GEMMA_CANVAS


@pytest.fixture(scope="module")
def model():
    return tiny_diffusion_gemma()


PROMPT = torch.tensor([[2, 17, 33, 5, 40, 9]])


@pytest.mark.parametrize("generation", [
    dict(max_new_tokens=24, max_denoising_steps=6),                                  # three canvases, defaults
    dict(max_new_tokens=16, max_denoising_steps=12, stability_threshold=0, confidence_threshold=0.4),  # stops early
    dict(max_new_tokens=16, max_denoising_steps=5, t_min=0.1, t_max=2.0, eos_token_id=[7, 11], pad_token_id=0),
])
def test_decode_returns_generates_tokens_at_the_same_seed(model, generation):
    torch.manual_seed(123)
    expected = model.generate(PROMPT, **generation)
    run = decode(model, PROMPT, seed=123, **generation)
    assert run.tokens == expected.sequences[0, PROMPT.shape[1]:].tolist()
    if "confidence_threshold" in generation:         # the case meant to stop early does
        assert run.records[0].canvas == 0 and any(r.stopped for r in run.records)
        assert run.forwards < 2 * generation["max_denoising_steps"]
    if "eos_token_id" in generation:                 # ... and the one meant to end at EOS pads after it
        assert run.tokens[0] == 7 and set(run.tokens[1:]) == {0} and len(run.tokens) == CANVAS
    assert run.tokens_per_forward() == pytest.approx(float(expected.tokens_per_forward[0]))


def test_trace_records_each_step_and_round_trips_through_the_schema(model, tmp_path):
    run = decode(model, PROMPT, seed=5, max_new_tokens=16, max_denoising_steps=6)
    assert [(r.canvas, r.step) for r in run.records][:7] == [(0, s) for s in range(6)] + [(1, 0)]
    for r in run.records:
        assert sorted(r.accepted + r.renoised) == list(range(CANVAS)) and len(r.entropy) == CANVAS
    # each step's input is the previous step's accepted draws, and noise elsewhere
    first, second = run.records[0], run.records[1]
    assert all(second.tokens_in[p] == first.sampled[p] for p in first.accepted)
    # the answer is each canvas's last argmax
    assert run.tokens[:CANVAS] == run.canvas_records(0)[-1].argmax
    assert max(len(r.accepted) for r in run.records) > 1
    settled = run.accepted_step()
    assert len(settled) == len(run.tokens) and any(s is not None and s > 0 for s in settled)
    loaded = CanvasRun.load(run.save(tmp_path / "run.json"))
    assert loaded.to_dict() == run.to_dict() and loaded.accepted_step() == settled


def test_schema_refuses_a_record_whose_accepted_and_renoised_do_not_split_the_canvas(model):
    run = decode(model, PROMPT, seed=5, max_new_tokens=8, max_denoising_steps=3)
    data = json.loads(run.to_json())
    data["records"][1]["renoised"] = data["records"][1]["renoised"][1:]
    with pytest.raises(ValueError, match="records.1: accepted and renoised must split"):
        CanvasRun.from_json(json.dumps(data))
    data = json.loads(run.to_json())
    data["records"][0]["entropy"][2] = -1.0
    with pytest.raises(ValueError, match="records.0.entropy.2"):
        CanvasRun.from_json(json.dumps(data))


def test_entropy_bound_accepts_the_lowest_entropies_while_the_bound_holds():
    entropy = torch.tensor([[0.30, 0.01, 0.05, 2.0, 0.02]])
    # sorted 0.01, 0.02, 0.05, 0.30, 2.0: running sums minus the newest 0, .01, .03, .08, .38
    assert entropy_bound_accept(entropy, 0.1).tolist() == [[True, True, True, False, True]]
    assert entropy_bound_accept(entropy, 0.02).tolist() == [[False, True, False, False, True]]
    assert entropy_bound_accept(entropy, 0.0).tolist() == [[False, True, False, False, False]]   # always one
    before = entropy.clone()
    entropy_bound_accept(entropy, 0.1)
    assert torch.equal(entropy, before)                                  # inputs unchanged


def test_temperature_falls_linearly_and_entropy_is_in_nats():
    steps = torch.tensor(4, dtype=torch.int32)
    assert float(linear_temperature(steps, 4, 0.4, 0.8)) == pytest.approx(0.8)
    assert float(linear_temperature(torch.tensor(1, dtype=torch.int32), 4, 0.4, 0.8)) == pytest.approx(0.5)
    uniform = torch.zeros(1, 2, 8)
    assert token_entropy(uniform)[0].tolist() == pytest.approx([torch.log(torch.tensor(8.0)).item()] * 2)


def test_settled_step_is_where_the_final_token_stayed_accepted():
    from lopa.models.canvas_trace import DenoiseRecord
    def rec(step, accepted, sampled):
        return DenoiseRecord(0, step, 3 - step, 1.0, [0, 0], sampled, sampled, [0.0, 0.0], accepted,
                             [p for p in (0, 1) if p not in accepted])
    records = [rec(0, [0], [5, 9]), rec(1, [0, 1], [5, 8]), rec(2, [0, 1], [5, 8])]
    assert settled_step(records, 0, 5) == 0 and settled_step(records, 1, 8) == 1
    assert settled_step(records, 1, 9) is None


def test_load_refuses_a_diffusion_gemma_folder_with_a_pointer_to_its_sampler(tmp_path, model):
    model.save_pretrained(tmp_path / "diffusiongemma-tiny")
    with pytest.raises(ValueError, match="DiffusionGemma checkpoint.*lopa.models.diffusion_gemma.decode"):
        load(tmp_path / "diffusiongemma-tiny")


def test_figures_show_each_step_from_the_trace_data(model):
    from visualizations.denoise import denoise_heatmap, denoise_step_html
    run = decode(model, PROMPT, seed=5, max_new_tokens=16, max_denoising_steps=6).to_dict()
    fig = denoise_heatmap(run, canvas=1)
    heat, accepted, settled = fig.data
    steps = [r for r in run["records"] if r["canvas"] == 1]
    assert [list(row) for row in heat.z] == [r["entropy"] for r in steps]
    assert len(accepted.x) == sum(len(r["accepted"]) for r in steps)
    assert list(settled.x) == [p for p, s in enumerate(run["settled"][CANVAS:]) if s is not None]
    html = denoise_step_html(run, 0, names={t: "<b>x</b>" for t in range(VOCAB)})
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html
    assert html.count("border:2px solid") == len(run["records"][0]["accepted"])
    assert "was not denoised" in denoise_heatmap(run, canvas=9).layout.annotations[0].text


def test_the_command_decodes_a_folder_and_saves_a_trace_equal_to_decode(model, tmp_path, capsys):
    from tiny import tiny_tokenizer

    from lopa.models.diffusion_gemma import main
    folder = tmp_path / "diffusiongemma-tiny"
    model.save_pretrained(folder)
    tokenizer = tiny_tokenizer()
    tokenizer.save_pretrained(folder)
    code = main(["--model", str(folder), "--prompt", "how many apples", "--device", "cpu", "--seed", "3",
                 "--max-new-tokens", "16", "--max-denoising-steps", "4", "--out", str(tmp_path / "t.json")])
    assert code == 0 and "denoising forwards" in capsys.readouterr().out
    saved = CanvasRun.load(tmp_path / "t.json")
    ids = tokenizer("how many apples", return_tensors="pt")["input_ids"]
    assert saved.tokens == decode(model, ids, seed=3, max_new_tokens=16, max_denoising_steps=4).tokens
    assert main(["--model", str(tmp_path / "nowhere"), "--prompt", "x"]) == 2
