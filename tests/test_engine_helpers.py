"""The pure helpers under the decoding loop, on hand-made branches and predictions, and the loop's size."""

import ast
import inspect

import torch

from lopa import chains, engine
from lopa.blocks import Branch
from lopa.forward import Verified
from lopa.settings import DecodeSettings

M = 99                                                       # the mask token id


def branch(tokens, n_cached=0, block_size=4):
    return Branch(torch.tensor(tokens), n_cached, block_size, M)


def test_free_positions_are_masked_and_not_the_anchor_s_and_the_anchor_is_untouched():
    anchor = branch([5, 6, 7, 8, 9, M, M, M], n_cached=1)     # window: [9, M, M, M]
    before = anchor.tokens.clone()
    free = engine.free_positions(anchor, torch.tensor([0, 2]))     # the anchor committed window 0, and 2 (a mask token)
    assert free.tolist() == [False, True, False, True]
    assert torch.equal(anchor.tokens, before)


def test_depth_1_branches_add_one_predicted_token_each():
    anchor = branch([5, M, M, M])
    tokens = torch.tensor([50, 51, 52, 53])                 # [W] the previous winner's predictions
    free = torch.tensor([False, True, True, True])
    got = chains.plan_branches(anchor, chains.chain_plan(torch.tensor([3, 1]), free, 1), tokens)
    assert [b.tokens.tolist() for b in got] == [[5, M, M, M], [5, M, M, 53], [5, 51, M, M]]
    assert anchor.tokens.tolist() == [5, M, M, M]
    assert chains.plan_branches(anchor, chains.chain_plan(torch.tensor([], dtype=torch.long), free, 1), tokens) == [anchor]


def test_scores_are_the_rule_over_each_branch_s_masked_positions():
    branches = [branch([5, M, M, M]), branch([5, M, M, 7])]
    conf = torch.tensor([[0.0, -1.0, -3.0, -2.0], [0.0, -0.5, -1.5, 0.0]])      # [B, W]
    verified = Verified(torch.zeros(2, 4, dtype=torch.long), conf.exp(), conf, [4, 4], 0.0)
    positions, _, masked_conf = engine.masked_predictions(branches[1], verified, 1)
    assert positions.tolist() == [1, 2] and masked_conf.tolist() == [-0.5, -1.5]
    scores = engine.score_branches(branches, verified, DecodeSettings())      # the paper's rule: mean Conf
    assert scores.tolist() == [-2.0, -1.0]


def test_the_loop_reads_on_one_screen_and_the_decoder_stays_small():
    """The issue's bound (#27): Decoder under 250 lines, its round loop on one screen (50 lines)."""
    lines = lambda node: node.end_lineno - node.lineno + 1      # noqa: E731
    decoder = next(n for n in ast.parse(inspect.getsource(engine)).body
                   if isinstance(n, ast.ClassDef) and n.name == "Decoder")
    loop = next(n for n in decoder.body if isinstance(n, ast.FunctionDef) and n.name == "_rounds")
    assert lines(decoder) < 250 and lines(loop) <= 50
