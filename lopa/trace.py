"""The trace: one RoundRecord per round, and the RunResult that collects them with metrics.

A record holds plain Python data (no tensors), enough to re-derive every decision of the round
without the model (tests/test_trace.py does exactly that). Positions are indices into the
generated sequence (0 = first position after the prompt).
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from lopa.parquet_trace import read_parquet
from lopa.read_budget import MAX_TRACE_BYTES, check_read, read_cost
from lopa.schema import TRACE_FORMAT, validate_trace


@dataclass
class RoundRecord:
    round: int
    kind: str                           # "prefill" (first forward), "round", "post" (token editing only: every
                                        # position committed, edits and a forward) or "final" (no forward needed)
    window_start: int                   # generated index of window position 0 during the forward
    # The anchor (round's step 1) and lookahead (step 2), computed from the previous winner's logits.
    anchor_positions: list[int]
    anchor_tokens: list[int]
    lookahead_positions: list[int]      # p_j of branch j = 1..k, best Conf first
    lookahead_tokens: list[int]
    # One entry per verified branch (index 0 = anchor): its window and, per still-masked position,
    # what the forward predicted there.
    branch_tokens: list[list[int]]      # window tokens as verified (mask id where masked)
    branch_positions: list[list[int]]   # still-masked generated positions
    branch_max_prob: list[list[float]]
    branch_conf: list[list[float]]
    branch_argmax: list[list[int]]      # predicted token (sampled when temperature > 0)
    branch_scores: list[float]          # C(B_j); inf when nothing is left masked
    branch_rank: list[int]              # process rank that computed each branch (0 in one process)
    winner: int
    block_states: list[str]             # after the round, of the winner (cached/complete/active_full/active_semi)
    committed: int                      # tokens this round added to the state (anchor + winning lookahead)
    n_cached_blocks: int                # blocks in the prefix cache after the round
    forward_seconds: float
    round_seconds: float
    extra: dict = field(default_factory=dict)   # executor timings (gather, commit, bytes), free-form
    # Decisions a script or a fork forced this round (lopa/script.py), e.g. {"action": "commit",
    # "position": 12, "token": 7}, {"action": "hold", "position": 14}; empty for the policy's own.
    forced: list = field(default_factory=list)
    # Lookahead chains (lookahead_depth > 1; empty at depth 1, where branch j's chain is its lookahead token and
    # its row is j). Per lookahead branch j, in rank order: its chain's generated positions and tokens, the row
    # (index into the branch_* lists) of each prefix of the chain, and how many of its tokens were kept. The
    # winner is then the kept prefix's row of the branch that won (lopa/chains.py).
    chain_positions: list = field(default_factory=list)
    chain_tokens: list = field(default_factory=list)
    chain_rows: list = field(default_factory=list)
    chain_kept: list = field(default_factory=list)
    # Token editing (edit_threshold < 1; lopa/editing.py; empty otherwise): the round's edits (generated positions, the
    # tokens they held and took, each new token's probability), the winner's predictions at its committed window
    # positions (what the next round's edits are decided on), and in the decode's last round why editing stopped
    # ("no_change" or "budget").
    edit_positions: list = field(default_factory=list)
    edit_old: list = field(default_factory=list)
    edit_tokens: list = field(default_factory=list)
    edit_prob: list = field(default_factory=list)
    edit_seen_positions: list = field(default_factory=list)
    edit_seen_argmax: list = field(default_factory=list)
    edit_seen_max_prob: list = field(default_factory=list)
    edit_stop: str = ""

    def filled(self) -> list[tuple[int, int, bool]]:
        """(position, token, by lookahead) committed by this round: the anchor's, then the winning
        branch's lookahead token, or the kept part of its chain (none when the anchor won)."""
        out = [(p, t, False) for p, t in zip(self.anchor_positions, self.anchor_tokens)]
        if self.winner > 0 and self.chain_rows:
            j = next(j for j, (rows, n) in enumerate(zip(self.chain_rows, self.chain_kept)) if rows[n - 1] == self.winner)
            out += [(p, t, True) for p, t in zip(self.chain_positions[j][:self.chain_kept[j]],
                                                 self.chain_tokens[j][:self.chain_kept[j]])]
        elif self.winner > 0 and self.winner - 1 < len(self.lookahead_positions):
            out.append((self.lookahead_positions[self.winner - 1], self.lookahead_tokens[self.winner - 1], True))
        return out

    def row_fills(self, j: int) -> list[tuple[int, int]]:
        """(position, token) that verified row j fills beyond the anchor: lookahead branch j's one token, or with
        chains the prefix of the first chain that row holds; [] for the anchor (row 0)."""
        if j == 0:
            return []
        for positions, tokens, rows in zip(self.chain_positions, self.chain_tokens, self.chain_rows):
            if j in rows:
                n = rows.index(j) + 1
                return list(zip(positions[:n], tokens[:n]))
        return [(self.lookahead_positions[j - 1], self.lookahead_tokens[j - 1])]

    def to_dict(self) -> dict:
        """The record as plain data, sharing no list or dict with it (dataclasses.asdict's result; asdict's
        generic deepcopy per leaf took about 0.6 ms a round on the bundled model, 4% of its decode)."""
        return {f.name: _copied(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: dict) -> RoundRecord:
        names = [f.name for f in dataclasses.fields(cls)]
        optional = {f.name for f in dataclasses.fields(cls)
                    if f.default_factory is not dataclasses.MISSING or f.default is not dataclasses.MISSING}
        missing = [n for n in names if n not in data and n not in optional]      # older traces lack the optional
        if missing:
            raise ValueError(f"not a LoPA round record: missing {missing}")
        return cls(**{n: data[n] for n in names if n in data})


_LEAVES = (int, float, str, bool, type(None))


def _copied(value):
    """A copy of JSON-like `value` (lists, tuples, dicts of numbers and strings) that shares nothing mutable."""
    if isinstance(value, dict):
        return {k: v if type(v) in _LEAVES else _copied(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(v if type(v) in _LEAVES else _copied(v) for v in value)
    return value


def _first_eos(tokens: list[int], eos_ids: list[int]) -> int | None:
    return next((i for i, t in enumerate(tokens) if t in eos_ids), None)


def authors_tpf(appended: int, forwards: int, runs: int = 1) -> float:
    """The TPF the authors report beside their scores, summed over `runs` decodes: every generated
    position of every appended block (EOS padding included) over their step count, which is the
    forwards + 1 per decode. Their loop (zhijie-group/LoPA scale_dream_d2f.py) counts a step at the
    top of every round, and a decode's count stops at the round that finds nothing left to do, one
    round after its last forward; `generate_until` then divides the summed x_t lengths past the
    prompt by the summed steps. Use this wherever a number stands beside the paper's."""
    return appended / (forwards + runs) if forwards else 0.0


# -- who filled which position, when, how sure: the one reading of a trace's commits --------------
ANCHOR, LOOKAHEAD = "anchor", "lookahead"


@dataclass(frozen=True)
class Fill:
    """How one generated position got its token."""
    round: int          # round whose decisions committed it
    token: int
    how: str            # ANCHOR or LOOKAHEAD (the winning branch's extra token)
    max_prob: float     # probability of the token when it was chosen (nan if unknown)
    conf: float         # Conf of the position when it was chosen (nan if unknown)


@dataclass(frozen=True)
class Prediction:
    """What one forward predicted at a still-masked position."""
    token: int
    max_prob: float
    conf: float


def predictions(record: RoundRecord, branch: int | None = None) -> dict[int, Prediction]:
    """Position -> prediction of `branch` (default: the winner) in this record's forward."""
    j = record.winner if branch is None else branch
    if j >= len(record.branch_positions):
        return {}
    return {p: Prediction(t, mp, c) for p, t, mp, c in zip(record.branch_positions[j], record.branch_argmax[j],
                                                          record.branch_max_prob[j], record.branch_conf[j])}


def _commits(records: list[RoundRecord], upto: int | None):
    """(round index, position, token, by lookahead) of every commit in rounds 1..upto, in order. A
    position committed twice (a committed mask token fills nothing, mask_argmax="authors") is
    filled by its last commit, so every reader below keeps the last."""
    last = len(records) - 1 if upto is None else min(upto, len(records) - 1)
    for r in range(1, last + 1):
        for p, t, ahead in records[r].filled():
            yield r, p, t, ahead


def fill_rounds(records: list[RoundRecord], upto: int | None = None) -> dict[int, int]:
    """Position -> the round that filled it, for rounds 1..upto (default: all)."""
    return {p: r for r, p, _, _ in _commits(records, upto)}


def fills(records: list[RoundRecord], upto: int | None = None) -> dict[int, Fill]:
    """Position -> Fill for every position committed in rounds 1..upto (default: all). Round r's
    anchor and lookahead were chosen from round r-1's winner predictions, hence the max prob."""
    out: dict[int, Fill] = {}
    before = {}
    for r, p, t, ahead in _commits(records, upto):
        if r not in before:
            before = {r: predictions(records[r - 1])}
        seen = before[r].get(p)
        out[p] = Fill(r, t, LOOKAHEAD if ahead else ANCHOR, seen.max_prob if seen else float("nan"),
                      seen.conf if seen else float("nan"))
    return out


@dataclass(frozen=True)
class Edit:
    """A committed position rewritten by token editing (lopa/editing.py)."""
    round: int          # the round that made the edit
    old: int            # the token it held
    new: int            # the token it took
    max_prob: float     # the new token's probability when the edit was decided


def edits(records: list[RoundRecord], upto: int | None = None) -> dict[int, Edit]:
    """Position -> its latest Edit in rounds 1..upto (default: all); positions never edited are absent."""
    last = len(records) - 1 if upto is None else min(upto, len(records) - 1)
    return {p: Edit(r, old, new, q) for r in range(1, last + 1)
            for p, old, new, q in zip(records[r].edit_positions, records[r].edit_old, records[r].edit_tokens,
                                      records[r].edit_prob)}


def fill_landscape(records: list[RoundRecord], useful: int) -> dict:
    """How uneven the token filling order was over the answer's first `useful` positions: the round
    each was filled in, its spread (population standard deviation, in rounds) and the share filled
    in the first round that filled any. A model sure of every token fills an answer in one or two
    rounds (spread near 0); the order has something to decide only where the fills spread out."""
    rounds = {p: r for p, r in fill_rounds(records).items() if p < useful}
    if not rounds:
        return {"fill_spread": 0.0, "first_fill_share": 0.0}
    values = list(rounds.values())
    return {"fill_spread": statistics.pstdev(values),
            "first_fill_share": values.count(min(values)) / len(values)}


def pooled(rows: list[dict], tokens: str = "tokens_useful", forwards: str = "forwards") -> dict:
    """Metrics over several decodes, the one place they are pooled: totals over the decodes before
    dividing (TPF = all tokens / all forwards, tokens/s = all tokens / all seconds, ms per forward =
    all forward seconds / all forwards), as the paper does; per-decode means where a number describes
    one decode (forwards, latency, the fill landscape). rows: metrics() of each decode, or rows
    holding its keys (`tokens` and `forwards` name the counts a TPF divides, e.g. forwards="forwards_floor"
    for the pipeline's ceiling)."""
    total = lambda key: sum(r.get(key, 0) for r in rows)      # noqa: E731
    mean = lambda key: total(key) / len(rows) if rows else 0.0      # noqa: E731
    useful, paper, n_forwards = total(tokens), total("tokens_paper"), total(forwards)
    latency, first, forward_s, rounds = total("latency_s"), total("first_round_s"), total("forward_s"), total("rounds")
    return {"runs": len(rows), "forwards": n_forwards, "tokens_useful": useful, "tokens_paper": paper,
            "tpf_useful": useful / n_forwards if n_forwards else 0.0,
            "tpf_paper": paper / n_forwards if n_forwards else 0.0,
            "tpf_authors": authors_tpf(paper, n_forwards, len(rows)),
            "latency_s": latency, "tps": useful / latency if latency > 0 else 0.0,
            "tps_excl_first": useful / (latency - first) if latency > first else 0.0,
            "rounds": rounds, "forward_s": forward_s,
            "token_forwards": total("token_forwards"), "token_forwards_mean": mean("token_forwards"),
            "chain_tokens": total("chain_tokens"), "chain_kept": total("chain_kept"), "chain_won": total("chain_won"),
            "ms_per_forward": 1e3 * forward_s / n_forwards if n_forwards else 0.0,
            # engine time outside the model's forwards (the decisions around it), per round of any kind
            "bookkeeping_ms_per_round": 1e3 * (latency - forward_s) / rounds if rounds else 0.0,
            "forwards_mean": mean(forwards), "latency_s_mean": mean("latency_s"),
            "fill_spread_mean": mean("fill_spread"), "first_fill_share_mean": mean("first_fill_share")}


def metrics(run: RunResult | None) -> dict:
    """The design note's metrics, the one place they are computed: the CLI, the benchmarks, the
    app's live counters and its summaries all call this. Works on any snapshot: a finished run, a
    live or stopped one (still-masked positions are not tokens), or none yet (all zeros).
    Forwards: a batched k + 1 forward counts once, the prompt round counts, a final round without
    a forward does not. Beside them the cost a forward count hides: token_forwards (token_forwards()
    summed: what every forward processed), latency_s (wall-clock) and `device`, what the run's
    forwards ran on (recorded in the prefill's extra). TPF 'useful' counts tokens up to the first EOS (headline); 'paper' counts
    every position of every appended block, EOS padding included, over the same forwards; 'authors'
    is the TPF the paper's tables report (authors_tpf: the paper count over forwards + 1)."""
    records = run.records if run is not None else []
    forwards = sum(r.kind != "final" for r in records)
    latency = sum(r.round_seconds for r in records)
    first = records[0].round_seconds if records else 0.0
    useful = len(run.useful_tokens) if records else 0
    paper = sum(t != run.spec["mask_token_id"] for t in run.tokens) if records else 0
    # Cost is paid per forward over whole windows, so tokens/s alone misleads: also the time to the
    # first committed token, and what each forward cost (its time, and the window positions of
    # every branch it verified).
    first_commit = next((i for i, r in enumerate(records) if r.committed), None)
    verified = sum(len(window) for r in records if r.kind != "final" for window in r.branch_tokens)
    forward_s = sum(r.forward_seconds for r in records)
    n_prompt = len(run.prompt_ids) if records else 0
    return {
        "rounds": len(records),
        "forwards": forwards,
        "tokens_useful": useful,
        "tokens_paper": paper,
        "tpf_useful": useful / forwards if forwards else 0.0,
        "tpf_paper": paper / forwards if forwards else 0.0,
        "tpf_authors": authors_tpf(paper, forwards),
        "latency_s": latency,
        "tps": useful / latency if latency > 0 else 0.0,
        "tps_excl_first": useful / (latency - first) if latency > first else 0.0,
        "forward_s": forward_s,
        "first_round_s": first,
        "ttft_s": sum(r.round_seconds for r in records[:first_commit + 1]) if first_commit is not None else 0.0,
        "ms_per_forward": 1e3 * forward_s / forwards if forwards else 0.0,
        "verified_per_forward": verified / forwards if forwards else 0.0,
        "token_forwards": sum(token_forwards(r, n_prompt) for r in records),
        # lookahead chains (lookahead_depth > 1): tokens the chains proposed past their first, how many of those
        # the verification stood behind, and how many the winning chains committed
        "chain_tokens": sum(len(c) - 1 for r in records for c in r.chain_positions),
        "chain_kept": sum(n - 1 for r in records for n in r.chain_kept),
        "chain_won": sum(sum(ahead for _, _, ahead in r.filled()) - 1 for r in records if r.chain_kept and r.winner),
        # token editing (lopa/editing.py): positions rewritten, and the rounds that only edited
        "edits": sum(len(r.edit_positions) for r in records),
        "post_rounds": sum(r.kind == "post" for r in records),
        "device": records[0].extra.get("device", "") if records else "",
        **fill_landscape(records, useful),
    }


def token_forwards(record: RoundRecord, n_prompt: int) -> int:
    """The positions one round's forward processed, the cost TPF leaves out: its B branches, each padded to
    the longest window W (B * W: a batched verify of k + 1 branches counts (k + 1) * W), behind the
    prompt's n_prompt in the prefill; 0 for a final round (no forward). The batched executor may feed
    fewer under block-causal attention (it packs the branches' shared blocks); this counts the method's
    batch, the same on every executor and device."""
    if record.kind == "final":
        return 0
    width = max((len(w) for w in record.branch_tokens), default=0)
    return len(record.branch_tokens) * width + (n_prompt if record.kind == "prefill" else 0)


@dataclass
class RunResult:
    """A finished (or stopped) run: inputs, every round, the output and its metrics."""
    prompt: str
    prompt_ids: list[int]
    settings: dict
    spec: dict
    records: list[RoundRecord]
    tokens: list[int]                   # every generated position (all appended blocks)
    text: str = ""                      # answer text up to the first EOS
    stopped: bool = False               # cancelled before it finished
    run_id: str = ""                    # unique per decode ("" in traces older than forks)
    forked_from: dict | None = None     # {"run_id": parent's run_id, "round": r} for a fork
    # The order policy that ran, where the settings alone do not name it (a study's measured cost
    # curve, SecondBranchAt): lopa.order.describe_order's dict; None = make_order(settings).
    order: dict | None = None
    # The in-process Decoder that made this run (model, policy, saved states) so forks can resume
    # from it; never serialized, so a loaded trace has None.
    decoder: object = field(default=None, repr=False, compare=False)

    @property
    def useful_tokens(self) -> list[int]:
        """Generated tokens up to and including the first EOS (still-masked positions of a
        stopped run are not tokens)."""
        end = _first_eos(self.tokens, self.spec["eos_token_ids"])
        kept = self.tokens if end is None else self.tokens[:end + 1]
        return [t for t in kept if t != self.spec["mask_token_id"]]

    def metrics(self) -> dict:
        return metrics(self)

    # -- serialisation -----------------------------------------------------------------------
    def header(self) -> dict:
        return {"format": TRACE_FORMAT, "prompt": self.prompt, "prompt_ids": self.prompt_ids,
                "settings": self.settings, "spec": self.spec, "tokens": self.tokens, "text": self.text,
                "stopped": self.stopped, "run_id": self.run_id, "forked_from": self.forked_from,
                **({"order": self.order} if self.order is not None else {})}

    def to_json(self) -> str:
        return json.dumps({**self.header(), "records": [r.to_dict() for r in self.records]})

    @classmethod
    def from_json(cls, text: str, reserve=None) -> RunResult:
        """Parse and validate (lopa.schema) a JSON trace; ValueError naming the bad field. Its read_cost
        is checked before json.loads builds anything (lopa.read_budget.check_read, `reserve` as there)."""
        if len(text) > MAX_TRACE_BYTES:
            raise ValueError(f"the trace is over {MAX_TRACE_BYTES >> 20} MB")
        check_read(read_cost(text), reserve)
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(f"not a JSON trace: {err}") from None
        except RecursionError:
            raise ValueError("not a LoPA trace: the JSON is nested too deeply") from None
        data = validate_trace(data)
        return cls._from_parts(data, data["records"])

    @classmethod
    def _from_parts(cls, header: dict, records: list[dict]) -> RunResult:
        try:
            return cls(prompt=header["prompt"], prompt_ids=list(header["prompt_ids"]), settings=header["settings"],
                       spec=header["spec"], records=[RoundRecord.from_dict(r) for r in records],
                       tokens=list(header["tokens"]), text=header.get("text", ""),
                       stopped=bool(header.get("stopped", False)), run_id=str(header.get("run_id") or ""),
                       forked_from=header.get("forked_from"), order=header.get("order"))
        except (KeyError, TypeError) as err:
            raise ValueError(f"not a LoPA trace: missing or malformed field {err}") from None

    def to_dataframe(self):
        """One row per round; list-valued columns stay lists. The run header rides in `df.attrs`."""
        import pandas as pd
        df = pd.DataFrame([r.to_dict() for r in self.records], columns=[f.name for f in dataclasses.fields(RoundRecord)])
        df["extra"] = df["extra"].map(json.dumps)
        df["forced"] = df["forced"].map(json.dumps)        # mixed dicts: JSON, like extra
        df.attrs["lopa"] = json.dumps(self.header())
        return df

    @classmethod
    def from_dataframe(cls, df) -> RunResult:
        if "lopa" not in df.attrs:
            raise ValueError("DataFrame has no LoPA run header in df.attrs['lopa']")
        rows = [{k: _plain(v) for k, v in row.items()} for row in df.to_dict(orient="records")]
        return cls._from_table(df.attrs["lopa"], rows)

    @classmethod
    def _from_table(cls, header_json: str | bytes, rows: list[dict]) -> RunResult:
        """One row per round (DataFrame or Parquet), `extra` and `forced` as JSON text, the header as
        JSON: decode, validate (lopa.schema), build."""
        try:
            header = json.loads(header_json)
            for row in rows:
                for name, empty in (("extra", {}), ("forced", [])):
                    value = row.get(name)
                    row[name] = json.loads(value) if isinstance(value, str) else (empty if value is None else value)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
            raise ValueError(f"the trace's header or JSON columns are not valid JSON: {err}") from None
        data = {**header, "records": rows} if isinstance(header, dict) else header
        data = validate_trace(data)
        return cls._from_parts(data, rows)

    def save(self, path: str | Path) -> Path:
        """Write JSON (.json) or Parquet (.parquet); the suffix decides."""
        path = Path(path)
        if path.suffix == ".json":
            path.write_text(self.to_json())
        elif path.suffix == ".parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq
            df = self.to_dataframe()
            table = pa.Table.from_pandas(df, preserve_index=False)
            table = table.replace_schema_metadata({**(table.schema.metadata or {}), b"lopa": df.attrs["lopa"].encode()})
            pq.write_table(table, path)
        else:
            raise ValueError(f"trace file must end in .json or .parquet, got {path.name!r}")
        return path

    @classmethod
    def load(cls, path: str | Path, reserve=None) -> RunResult:
        """Read a trace written by `save`. Only parses data, never executes or unpickles anything;
        every field is validated (lopa.schema) before the run is built. ValueError otherwise. The
        read's peak is bounded before each step that spends it (lopa.read_budget.check_read; Parquet:
        lopa.parquet_trace); `reserve(nbytes)`, called with each bound, may refuse it too."""
        path = Path(path)
        if path.suffix not in (".json", ".parquet"):
            raise ValueError(f"trace file must end in .json or .parquet, got {path.name!r}")
        try:
            size = path.stat().st_size
        except OSError as err:
            raise ValueError(f"cannot read {path.name}: {err.strerror}") from None
        if size > MAX_TRACE_BYTES:
            raise ValueError(f"{path.name} is {size >> 20} MB; traces are limited to {MAX_TRACE_BYTES >> 20} MB")
        if path.suffix == ".parquet":
            return cls._from_table(*read_parquet(path, size, reserve))
        check_read(size, reserve)
        raw = path.read_bytes()
        check_read(size + (size if raw.isascii() else 4 * size), reserve)     # the bytes and their text
        try:
            text = raw.decode("utf-8", errors="strict")
        except UnicodeDecodeError as err:
            raise ValueError(f"{path.name} is not UTF-8 text: {err.reason}") from None
        del raw
        return cls.from_json(text, reserve)


def _plain(value):
    """numpy arrays and scalars from pandas/pyarrow back to Python lists and numbers."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
