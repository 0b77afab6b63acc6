"""commit=dawn end to end: the attention the batched executor records (lopa.dependency) against the model's own
eager attention, and decodes under the rule (the rule itself is pinned in tests/test_peers.py)."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from lopa import Decoder
from lopa.blocks import Branch
from lopa.dependency import LAST_LAYERS
from lopa.engine import fork
from lopa.forward import BatchedExecutor, attention_mask
from lopa.models import load
from lopa.models.loading import DEFAULT_MODEL
from lopa.resolution import resolve
from lopa.tasks import synthetic


@pytest.fixture(scope="module")
def bundled():
    loaded = load(str(DEFAULT_MODEL))
    problems, _ = synthetic.TASK.problems("synthetic", 3, 71123, loaded.spec.extra.get("problems"))
    return loaded, [synthetic.TASK.prompt(loaded, p, "", 0) for p in problems]


@pytest.fixture(scope="module")
def eager_model():
    """The bundled model again, with transformers' eager attention, which returns its probabilities."""
    return AutoModelForCausalLM.from_pretrained(str(DEFAULT_MODEL), attn_implementation="eager").eval()


def reference_rows(eager_model, prompt_ids, window, mode, n_layers):
    """The head mean of the last LAST_LAYERS layers' attention over one uncached forward of [prompt ; window]:
    the window's rows, [W, P0 + W]."""
    ids = torch.cat([prompt_ids, window])[None]
    P0, W = prompt_ids.numel(), window.numel()
    segments = torch.cat([torch.zeros(P0, dtype=torch.long), torch.ones(W, dtype=torch.long)])[None]
    allowed = attention_mask(segments, mode, True)                                   # [1, 1, L, L] bool
    additive = torch.zeros(allowed.shape).masked_fill(~allowed, float("-inf"))
    with torch.no_grad():
        out = eager_model(input_ids=ids, attention_mask=additive, position_ids=torch.arange(ids.shape[1])[None],
                          output_attentions=True, use_cache=False)
    layers = out.attentions[max(n_layers - LAST_LAYERS, 0):]                         # [1, H, L, L] each
    return torch.stack([a[0].mean(0) for a in layers]).mean(0)[P0:]                # [W, L]


@pytest.mark.parametrize("mode", ["block_causal", "full_prompt_blind"])
def test_recorded_attention_is_the_models_own(bundled, eager_model, mode):
    """The prefill's rows (the prompt in the input) and the next forward's (the prompt cached): the same head
    and layer mean as the model's eager attention over the uncached sequence, to float rounding."""
    loaded, prompts = bundled
    settings = resolve({"commit": "dawn", "attention": mode, "max_new_tokens": 64}, loaded.spec)
    ex = BatchedExecutor(loaded.model, loaded.spec, settings)
    prompt_ids = torch.as_tensor(prompts[0], dtype=torch.long)
    state = Branch.start(settings, loaded.spec)
    ex.start(prompt_ids)
    first = ex.verify([state]).attention[0]
    ex.commit(0, 0)
    second = ex.verify([state]).attention[0]
    expected = reference_rows(eager_model, prompt_ids, state.window(), mode, loaded.model.config.num_hidden_layers)
    assert first.shape == second.shape == expected.shape
    assert torch.allclose(first, expected, atol=1e-5) and torch.allclose(second, expected, atol=1e-5)


def test_only_dawn_records_attention(bundled):
    loaded, _ = bundled
    assert BatchedExecutor(loaded.model, loaded.spec, resolve({}, loaded.spec)).probe is None
    assert BatchedExecutor(loaded.model, loaded.spec, resolve({"commit": "dawn"}, loaded.spec)).probe is not None


@pytest.mark.parametrize("k", [0, 4])
def test_dawn_decodes_alike_on_the_fast_path_and_its_reference(bundled, k):
    loaded, prompts = bundled
    settings = resolve({"commit": "dawn", "k": k, "max_new_tokens": 64}, loaded.spec)
    for prompt in prompts:
        fast = loaded.decoder(settings).run(prompt)
        eager = loaded.decoder(settings, executor="batched_eager").run(prompt)
        assert fast.tokens == eager.tokens and [r.winner for r in fast.records] == [r.winner for r in eager.records]


def test_dawn_commits_more_per_forward_where_its_floor_is_lower(bundled):
    """The rule is what decides: at dawn_low 0.3 the conflict-free set takes positions the threshold rule leaves
    masked, so the same prompts need fewer forwards than under D2F's threshold."""
    loaded, prompts = bundled
    forwards = {}
    for name, request in {"threshold": {}, "dawn": {"commit": "dawn", "dawn_low": 0.3}}.items():
        settings = resolve({**request, "max_new_tokens": 64}, loaded.spec)
        forwards[name] = sum(loaded.decoder(settings).run(p).metrics()["forwards"] for p in prompts)
    assert forwards["dawn"] < forwards["threshold"], forwards


def test_dawn_is_refused_where_no_attention_is_recorded(bundled):
    loaded, _ = bundled
    settings = resolve({"commit": "dawn"}, loaded.spec)
    with pytest.raises(ValueError, match="batched"):
        Decoder(loaded.model, loaded.spec, settings, loaded.tokenizer, executor="per_branch")


def test_a_fork_under_dawn_resumes_or_replays_to_the_same_decode(bundled):
    """A saved state carries the winner's attention: resuming from it decides as the run did, and so does
    replaying the recorded decisions."""
    loaded, prompts = bundled
    settings = resolve({"commit": "dawn", "k": 2, "max_new_tokens": 64}, loaded.spec)
    decoder = Decoder(loaded.model, loaded.spec, settings, loaded.tokenizer, keep_states=True)
    run = decoder.run(prompts[1])
    assert len(run.records) > 3
    resumed = fork(run, 2)
    run.decoder = None
    replayed = fork(run, 2, model=loaded)
    assert resumed.tokens == replayed.tokens == run.tokens


def test_a_dawn_round_records_why_it_committed_and_the_page_says_it(bundled):
    """Each round's extra["commit_reasons"] holds the rule's sets (generated positions): what it committed is
    exactly sure | induced | free | fallback, and the round's explanation names them."""
    from visualizations.branches import explain_round
    loaded, prompts = bundled
    settings = resolve({"commit": "dawn", "dawn_low": 0.3, "k": 2, "max_new_tokens": 64}, loaded.spec)
    run = loaded.decoder(settings).run(prompts[0])
    rounds = [r for r in run.records if r.kind != "prefill"]
    assert rounds
    seen = set()
    for rec in rounds:
        why = rec.extra["commit_reasons"]
        assert sorted(why["sure"] + why["induced"] + why["free"] + why["fallback"]) == sorted(rec.anchor_positions)
        seen |= {k for k, v in why.items() if v}
    assert {"sure", "free"} <= seen
    rec = next(r for r in rounds if r.extra["commit_reasons"]["free"] and r.kind == "round")
    text = explain_round(run, rec.round)
    assert "no two lean on each other" in text


def test_a_held_position_stays_undecided_for_dawn(bundled):
    """A script that holds a masked position back keeps it out of the commits, and the rule still reads it as
    undecided (RoundView.unfilled), never as decoded context."""
    from lopa.order import ConfidenceOrder, RoundView
    from lopa.settings import DecodeSettings
    s = DecodeSettings(commit="dawn", block_size=4, max_new_tokens=4, dawn_low=0.3, dawn_sink=0.9, dawn_edge=0.3)
    attention = torch.full((4, 4), 0.01, dtype=torch.float64)
    attention[1, 0] = 0.6                                  # 1 leans on 0
    p = torch.tensor([0.95, 0.75, 0.5, 0.5])
    unfilled = torch.tensor([True, True, True, True])
    held = unfilled.clone()
    held[0] = False                                        # position 0 held back by a script
    view = RoundView(1, 0, 4, torch.arange(4), p, p, held, [True], s, 99, attention=attention, unfilled=unfilled)
    commits = ConfidenceOrder().anchor(view)
    assert 0 not in commits.positions.tolist()
    assert 1 not in commits.reasons["induced"]             # 0 is undecided, so it induces nothing


def test_the_canvas_says_why_the_rule_committed_or_held_each_cell(bundled):
    """A dawn round's cells: an anchor cell's hover names the set it was committed from, a held-back masked cell
    says why it waits; a rule that records no reasons adds nothing."""
    from visualizations.canvas import REASON_WORDS, token_canvas
    loaded, prompts = bundled
    settings = resolve({"commit": "dawn", "dawn_low": 0.3, "k": 0, "max_new_tokens": 64}, loaded.spec)
    run = loaded.decoder(settings).run(prompts[0])
    said = set()
    for rec in run.records:
        html = token_canvas(run, rec.round)
        said |= {k for k, words in REASON_WORDS.items() if words in html.replace("&#x27;", "'")}
    assert {"sure", "free"} <= said
    plain = loaded.decoder(resolve({"max_new_tokens": 64}, loaded.spec)).run(prompts[0])
    assert not any(words in token_canvas(plain, 1) for words in REASON_WORDS.values())
