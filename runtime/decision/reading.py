"""Reading a decision checkpoint: an instance -> its questions' prompts -> one plan of forked segments; label
logits -> answers, as the checkpoint's decision format defines (runtime/decision/format.py).

Consumes a tree, an instance, the DecisionFormat and the checkpoint's tokenizer; produces the binder's Plan
and answer Shape (runtime/binder.py), and answer objects from each read's head-row logits. Every question's
whole prompt is rendered (render.py); the segments follow the tree (the state's root, each fork branch,
each question) and each is cut where the prompts under it part, moved back to the nearest place where a
cut keeps the whole prompt's token ids: right before or after an added token or a `boundary()`, or, for a
tokenizer whose cuts are known exact (ModelTokenizer.cuts_exact), right after a newline that
non-whitespace follows. So every read's path ids are its whole prompt's ids (E3's plain pass), and the
questions fork where their prompts part, the state first when the format puts nothing that depends on the
question before it. A tree's path texts (fork branches, texts) follow the state, joined by a blank line.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flidec.ir.errors import Diagnostic, InstanceError, SpecError
from flidec.ir.instance import takes_key, validate_instance
from flidec.ir.tree import (
    Ask,
    Bound,
    ChoiceOptions,
    Fork,
    Node,
    NoulCriteria,
    ScoreLevels,
    Text,
    Tree,
    asks_in,
)
from flidec.runtime import answers_math as answers
from flidec.runtime.binder import Plan, Shape
from flidec.runtime.decision.format import DecisionFormat
from flidec.runtime.decision.render import BOUNDARY, Question, Refusal, Renderer, describe
from flidec.runtime.next_token import RUN_CHARS, text_runs

SEP = "\n\n"  # between the state and each path text


@dataclass(frozen=True, slots=True)
class DecisionPiece:
    """One read as bound: its own segment's ids, the head rows it reads (each option's forms in turn, `forms`
    rows an option) and how they become its answer."""

    ids: tuple[int, ...]
    labels: tuple[int, ...]
    kind: str
    names: tuple[Any, ...]  # choice: option names; score: the levels (the legend); noul: ()
    forms: tuple[int, ...]
    temperature: float
    true_index: int = 0  # noul: which option is "true"


@dataclass(frozen=True, slots=True)
class _Site:
    """A read as walked: the tree nodes above it (the root first), its path texts and its question."""

    chain: tuple[int, ...]
    texts: tuple[str, ...]
    ask: Ask
    question: Question
    path: str


class DecisionReading:
    """A DecisionFormat over one tokenizer: what the runtime binds and answers with (`walker`, `answer`)."""

    name = "decision"

    def __init__(self, fmt: DecisionFormat, tokenizer: Any, bias: Sequence[float] | None = None):
        self.fmt, self.tok = fmt, tokenizer
        self.renderer = Renderer(fmt, tokenizer)
        self.bias = None if bias is None else tuple(float(b) for b in bias)
        if fmt.head.bias and self.bias is None:
            raise ValueError("the format's readout head has a bias: pass it")
        safe = sorted(tokenizer.added_tokens, key=len, reverse=True)
        self._cuts = re.compile("|".join(re.escape(t) for t in [BOUNDARY, *safe]))

    def count_tokens(self, text: str) -> int:
        return len(self.tok.encode(text))

    def walker(self, tree: Tree, verify: bool = False, max_path: int | None = None) -> DecisionWalker:
        """The walker that plans `tree`'s instances; `max_path`: the most tokens a read's path may have (the
        artifact's largest bucket; the format's max_prompt_tokens applies too)."""
        return DecisionWalker(self, tree, verify, max_path)

    # -- answers -------------------------------------------------------------------------------------------
    def answer(self, piece: DecisionPiece, logits: Sequence[float]) -> dict:
        """The answer from the read's head-row logits (fp32, in `piece.labels` order), in float64: bias, soft
        cap, each option's forms by log-sum-exp, the temperature, then the softmax over the options."""
        xs = [float(x) for x in logits]
        if self.bias is not None:
            xs = [x + self.bias[row] for x, row in zip(xs, piece.labels, strict=True)]
        cap = self.fmt.head.softcap
        if cap is not None:
            xs = [cap * math.tanh(x / cap) for x in xs]
        z, k = [], 0
        for n in piece.forms:
            z.append(_logsumexp(xs[k : k + n]))
            k += n
        z = [v / piece.temperature for v in z]
        if piece.kind == "noul":
            t = piece.true_index
            return answers.noul_answer([z[t], z[1 - t]])
        if piece.kind == "choice":
            return answers.choice_answer(piece.names, z)  # type: ignore[arg-type]
        return answers.score_answer(piece.names, z)

    # -- compile-time checks -------------------------------------------------------------------------------
    def check_tree(self, tree: Tree) -> None:
        """SpecError for an ask this format can never answer: none of its types is one the format takes, or
        the spec fixes its options beyond the format's labels."""
        problems = []
        for ask in asks_in(tree.body):
            kinds = [t.kind for t in ask.types]
            if not set(kinds) & set(self.fmt.types):
                problems.append(
                    Diagnostic(
                        ask.loc,
                        f"ask `{ask.name}`: this model's decision format answers "
                        f"{', '.join(self.fmt.types)} questions, not {', '.join(kinds)}",
                    )
                )
            c = ask.criteria
            n = (
                len(c.options)
                if isinstance(c, ChoiceOptions)
                else len(c.levels)
                if isinstance(c, ScoreLevels)
                else None
            )
            if n is not None and len(kinds) == 1 and n > self.fmt.most_options(kinds[0]):
                problems.append(
                    Diagnostic(
                        ask.loc,
                        f"ask `{ask.name}`: {n} options, more than the "
                        f"{self.fmt.most_options(kinds[0])} this model's format reads",
                    )
                )
        if problems:
            raise SpecError(problems)

    def probe_tokens(self, kind: str, options: int) -> int:
        """Tokens of a one-question prompt of `kind` with `options` bare options and an empty state: the
        format's own framing, an upper bound of what it adds around the texts (compile-time sizing)."""
        n = 2 if kind == "noul" else max(2, min(options, self.fmt.most_options(kind)))
        q = Question(
            "q",
            kind,
            "?",
            {} if kind == "noul" else None,
            ("criteria", "instructions", "type"),
            tuple((k, None) for k in self.fmt.noul)
            if kind == "noul"
            else tuple((str(i), None) for i in range(n)),
        )
        state_text = "" if self.fmt.state is not None else None
        try:
            labels = self.fmt.labels_for(kind, n)
            text = self.renderer.prompt("", state_text, q, labels, [q])
        except (Refusal, ValueError):
            text = "".join(c for _, c in self.fmt.messages) + (
                self.fmt.prompt or ""
            )  # the templates' own size
        return sum(len(self.tok.encode_template(p)) for p in text.split(BOUNDARY))

    def sharing(self) -> tuple[int, bool]:
        """How the format's questions fork: the tokens of the format's own text before the state that
        questions share, and whether they share the state too (so fork after it), found with a probe state
        and two probe questions (a noul and a choice, or two of the one type the format takes)."""
        probe = "Flidec probe state.\nIt has two lines."
        kinds = [k for k in ("noul", "choice") if k in self.fmt.types] or [self.fmt.types[0]]
        qs = [self._probe_question(kinds[i % len(kinds)], f"q{i}", f"Probe question {i}?") for i in range(2)]
        state_text = self.renderer.state_text(probe, None)[0] if self.fmt.state is not None else None
        try:
            prompts = [
                self.renderer.prompt(probe, state_text, q, self.fmt.labels_for(q.kind, len(q.options)), qs)
                for q in qs
            ]
        except (Refusal, ValueError):
            return 0, False
        cut = self.cut(prompts, 0)
        shown = state_text or probe
        at = prompts[0].find(shown)
        before = prompts[0][: at if 0 <= at < cut else cut]
        tokens = sum(len(self.tok.encode_template(p)) for p in before.split(BOUNDARY) if p)
        return tokens, at >= 0 and cut >= at + len(shown)

    def _probe_question(self, kind: str, key: str, instructions: str) -> Question:
        if kind == "noul":
            return Question(
                key,
                kind,
                instructions,
                {},
                ("instructions", "type"),
                tuple((k, self.fmt.noul_text.get(k)) for k in self.fmt.noul),
            )
        criteria = {"x": None, "y": None} if kind == "choice" else ["low", "high"]
        options = (("x", None), ("y", None)) if kind == "choice" else (("0", "low"), ("1", "high"))
        return Question(key, kind, instructions, criteria, ("criteria", "instructions", "type"), options)

    def describe(self) -> list[str]:
        """The format as `flidec inspect` prints it."""
        f = self.fmt
        tokens, after = self.sharing()
        temps = ", ".join(
            f"{k} T={math.exp(t.a):.4g}" + (f"*n^{t.b:.4g}" if t.b else "") for k, t in f.temperature.items()
        )
        head = (
            f"readout {f.head.rows} rows" + (" with a bias" if f.head.bias else "")
            if f.head.kind == "readout"
            else "output head" + (f", soft cap {f.head.softcap:g}" if f.head.softcap else "")
        )
        sets = "; ".join(
            f"{k}: "
            + ", ".join(f"{len(t.labels)}" + (f" up to {t.upto}" if t.upto else "") for t in f.labels[k])
            for k in f.types
        )
        forms = max(len(r) for r in f.rows.values())
        return [
            f"  format   decision, from {f.source}: "
            + ("chat turns " + "+".join(r for r, _ in f.messages) if f.messages else "a raw prompt")
            + (", thinking on" if f.thinking else "")
            + f"; head {head}",
            f"           types {', '.join(f.types)}; labels {sets}"
            + (f" ({forms} forms each)" if forms > 1 else "")
            + f"; at most {f.max_options} options, {f.max_prompt_tokens} prompt tokens",
            f"           temperature {temps}; noul order {'/'.join(f.noul)}"
            + (f"; state cut to {f.state.max_tokens} tokens" if f.state else ""),
            "           "
            + (
                f"questions share the format's {tokens} tokens before the state, the state and "
                "each path text, then fork"
                if after
                else f"questions share only {tokens} tokens: the format puts text that depends on the "
                "question before the state, so each question computes the state"
            ),
        ]

    # -- cuts ------------------------------------------------------------------------------------------------
    def cut(self, prompts: Sequence[str], lo: int) -> int:
        """The furthest place at or after `lo` and before the prompts part (and before each one's last
        character) where a cut keeps every prompt's token ids; `lo` when there is none."""
        top = min(len(p) for p in prompts) - 1
        first = prompts[0]
        for p in prompts[1:]:
            top = min(top, _common(first, p, top))
        if top <= lo:
            return lo
        best = lo
        for m in self._cuts.finditer(first, lo, top + len(BOUNDARY)):
            if best < m.end() <= top:  # after a token or boundary: in the prefix every prompt shares
                best = m.end()
            elif best < m.start() <= top and all(self._cuts.match(p, m.start()) for p in prompts):
                best = m.start()  # before one that every prompt has there
        if self.tok.cuts_exact:
            at = first.rfind("\n", lo, top)
            while at >= 0 and at + 1 > best:
                c = at + 1
                if all(not p[c].isspace() for p in prompts):
                    best = c
                    break
                at = first.rfind("\n", lo, at)
        return best


class DecisionWalker:
    """Plans one instance of `tree` (the Program's walker for a decision format). `verify`: check every read's
    path ids against its whole prompt tokenized in one go."""

    def __init__(
        self, reading: DecisionReading, tree: Tree, verify: bool = False, max_path: int | None = None
    ):
        self.r, self.tree, self.verify, self.max_path = reading, tree, verify, max_path

    def plan(self, instance: Any) -> tuple[Plan, Shape]:
        validate_instance(self.tree, instance, self.r.count_tokens)
        state = instance[self.tree.state.name]
        sites: list[_Site] = []
        self._nodes = 1  # the root is node 0
        shape = self._body(self.tree.body, instance, (0,), (), "", sites, True)
        if not sites:
            raise InstanceError(["the instance asks no question"])
        fmt = self.r.fmt
        questions = [s.question for s in sites]
        budget: int | None = None
        tries = fmt.state.tries if fmt.state is not None else 1
        for _ in range(tries):
            state_text, n_state = self.r.renderer.state_text(state, budget) if fmt.state else (None, 0)
            prompts, pieces = self._render(sites, state, state_text, questions)
            shown = state_text if state_text is not None else describe(state)
            plan, lengths = self._segments(sites, prompts, pieces, shown)
            longest = max(lengths)
            limit = min(fmt.max_prompt_tokens, self.max_path or fmt.max_prompt_tokens)
            over = longest - limit
            if over <= 0:
                break
            worst = sites[lengths.index(longest)].path
            if fmt.state is None:
                raise InstanceError(
                    [
                        f"{worst}: its prompt is {longest} tokens, over the {limit} this "
                        f"{'format' if limit == fmt.max_prompt_tokens else 'artifact'} takes"
                    ]
                )
            budget = min(fmt.state.max_tokens if budget is None else budget, n_state) - over - fmt.state.slack
            if budget < max(fmt.state.min_tokens, 1):
                raise InstanceError(
                    [f"{worst}: the questions leave no room for the state within {limit} prompt tokens"]
                )
        else:
            raise InstanceError(
                [
                    f"{worst}: its prompt is still {longest} tokens after {tries} cuts of the "
                    f"state, over the {limit} this format takes"
                ]
            )
        if self.verify:
            for (seg, _, path), prompt in zip(plan.reads, prompts, strict=True):
                whole = [
                    i for part in prompt.split(BOUNDARY) if part for i in self.r.tok.encode_template(part)
                ]
                if plan.path_ids(seg) != whole:
                    raise InstanceError(
                        [f"{path}: its token pieces do not add up to its whole prompt's tokens"]
                    )
        return plan, shape

    # -- the tree ------------------------------------------------------------------------------------------
    def _node(self) -> int:
        self._nodes += 1
        return self._nodes - 1

    def _body(
        self,
        nodes: tuple[Node, ...],
        obj: Mapping,
        chain: tuple[int, ...],
        texts: tuple[str, ...],
        prefix: str,
        sites: list[_Site],
        is_open: bool,
    ) -> dict:
        shape: dict = {}
        for node in nodes:
            if isinstance(node, Text):
                text = node.value if isinstance(node.value, str) else obj[node.name]
                if not is_open:  # after a branch point: a segment of its own
                    chain, is_open = (*chain, self._node()), True
                if text.lstrip():
                    texts = (*texts, text.lstrip())
            elif isinstance(node, Ask):
                is_open = False
                shape[node.name] = self._ask(node, obj, chain, texts, prefix + node.name, sites)
            else:
                is_open = False
                shape[node.name] = self._fork(node, obj, chain, texts, prefix + node.name, sites)
        return shape

    def _fork(
        self,
        fork: Fork,
        obj: Mapping,
        chain: tuple[int, ...],
        texts: tuple[str, ...],
        path: str,
        sites: list[_Site],
    ) -> list:
        out = []
        for i, branch in enumerate(obj[fork.name]):
            btexts = texts
            if fork.text is not None and branch["text"].lstrip():
                btexts = (*texts, branch["text"].lstrip())
            out.append(
                self._body(fork.body, branch, (*chain, self._node()), btexts, f"{path}[{i}].", sites, True)
            )
        return out

    def _ask(
        self,
        ask: Ask,
        obj: Mapping,
        chain: tuple[int, ...],
        texts: tuple[str, ...],
        path: str,
        sites: list[_Site],
    ) -> Shape:
        if ask.repeat is not None:
            out = {}
            for qid, q in obj[ask.name].items():
                qpath = f"{path}[{_quote(qid)}]"
                sites.append(_Site(chain, texts, ask, self._question(ask, q, qpath, qid), qpath))
                out[qid] = len(sites) - 1
            return out
        q = obj[ask.name] if takes_key(ask) else None
        sites.append(_Site(chain, texts, ask, self._question(ask, q, path, ask.name), path))
        return len(sites) - 1

    def _question(self, ask: Ask, q: Mapping | None, path: str, key: str) -> Question:
        """The question as the templates see it: its type, instructions and criteria as given (or as the
        spec fixes them), which fields it gave and its options in prompt order."""
        fmt, q = self.r.fmt, q or {}
        kinds = [t.kind for t in ask.types]
        kind = q.get("type", kinds[0]) if len(kinds) == 1 else q.get("type")
        if kind not in kinds:
            raise InstanceError([f"{path}.type: must be one of {kinds}, got {kind!r}"])
        if kind not in fmt.types:
            raise InstanceError(
                [
                    f"{path}.type: this model's decision format answers "
                    f"{', '.join(fmt.types)} questions, not {kind}"
                ]
            )
        given = {k for k in ("type", "instructions", "criteria") if k in q}
        if isinstance(ask.instructions, Bound):
            instructions = q.get("instructions")
        else:
            instructions = ask.instructions
            given |= {"instructions"} if ask.instructions is not None else set()
        c = ask.criteria
        if isinstance(c, Bound):
            criteria = q.get("criteria")
        else:
            criteria = (
                None
                if c is None
                else {"true": c.true, "false": c.false}
                if isinstance(c, NoulCriteria)
                else dict(c.options)
                if isinstance(c, ChoiceOptions)
                else list(c.levels)
            )
            given |= {"criteria"} if c is not None else set()
        if kind == "noul":
            crit = (
                {k: v for k, v in (criteria or {}).items() if v is not None}
                if isinstance(criteria, (Mapping, type(None)))
                else None
            )
            if crit is None or not set(crit) <= {"true", "false"}:
                raise InstanceError(
                    [f"{path}.criteria: a noul's criteria is null or an object with keys true/false"]
                )
            options = tuple((k, crit.get(k, fmt.noul_text.get(k))) for k in fmt.noul)
            criteria = dict(criteria or {})
        elif kind == "choice":
            if criteria is None:  # a constant choice[n] without criteria: n undescribed options
                n = next(t for t in ask.types if t.kind == "choice").options.hi
                criteria = dict.fromkeys(self._labels(kind, n, path))
            options = tuple((str(k), v) for k, v in criteria.items())
        else:
            if criteria is None:
                n = next(t for t in ask.types if t.kind == "score").options.hi
                criteria = [str(i) for i in range(n)]
            options = tuple((str(i), level) for i, level in enumerate(criteria))
        atype = ask.types[kinds.index(kind)]
        n = len(options)
        if kind != "noul" and not atype.options.lo <= n <= atype.options.hi:
            raise InstanceError(
                [f"{path}.criteria: {n} options, allowed {atype.options.lo} to {atype.options.hi}"]
            )
        if n > fmt.max_options:
            raise InstanceError(
                [f"{path}.criteria: {n} options, more than the {fmt.max_options} this model's format takes"]
            )
        return Question(key, kind, instructions, criteria, tuple(sorted(given)), options)

    def _labels(self, kind: str, n: int, path: str) -> tuple[str, ...]:
        try:
            return self.r.fmt.labels_for(kind, n)
        except ValueError as e:
            raise InstanceError([f"{path}.criteria: {e}"]) from None

    # -- prompts and segments -------------------------------------------------------------------------------
    def _render(
        self, sites: list[_Site], state: Any, state_text: str | None, questions: list[Question]
    ) -> tuple[list[str], list[DecisionPiece]]:
        """Each read's whole prompt and its piece (without ids yet)."""
        fmt = self.r.fmt
        prompts, pieces = [], []
        for site in sites:
            q = site.question
            labels = self._labels(q.kind, len(q.options), site.path)
            try:
                prompts.append(self._prompt(site, state, state_text, labels, questions))
            except Refusal as e:
                raise InstanceError([f"{site.path}: {e}"]) from None
            rows = [fmt.rows[label] for label in labels]
            names = (
                tuple(k for k, _ in q.options)
                if q.kind == "choice"
                else tuple(q.criteria)
                if q.kind == "score"
                else ()
            )
            pieces.append(
                DecisionPiece(
                    (),
                    tuple(r for rs in rows for r in rs),
                    q.kind,
                    names,
                    tuple(len(rs) for rs in rows),
                    fmt.temperature[q.kind].at(len(labels)),
                    [k for k, _ in q.options].index("true") if q.kind == "noul" else 0,
                )
            )
        return prompts, pieces

    def _prompt(
        self,
        site: _Site,
        state: Any,
        state_text: str | None,
        labels: tuple[str, ...],
        questions: list[Question],
    ) -> str:
        """A read's whole prompt. Its path's texts follow the state's text, each after a blank line and
        tokenized apart from what is before and after it, so every level of the tree forks; where the
        template does not show that text as it is (it JSON-quotes the state, say), they are only joined by
        blank lines."""
        render = self.r.renderer.prompt
        if not site.texts:
            return render(state, state_text, site.question, labels, questions)
        apart = "".join(BOUNDARY + SEP + t for t in site.texts) + BOUNDARY
        shown = state_text if state_text is not None else describe(state)
        st, st_text = (state, shown + apart) if state_text is not None else (shown + apart, None)
        prompt = render(st, st_text, site.question, labels, questions)
        if apart in prompt:
            return prompt
        joined = SEP.join((shown, *site.texts))
        st, st_text = (state, joined) if state_text is not None else (joined, None)
        return render(st, st_text, site.question, labels, questions)

    def _parts(self, text: str) -> list[str]:
        """A span of a prompt as the pieces it is tokenized in: split at its boundaries, and a long piece
        into runs where a cut keeps its ids (next_token.text_runs, for tokenizers whose cuts are exact), so
        one batch encodes a long state on every core."""
        parts = [part for part in text.split(BOUNDARY) if part]
        if not self.r.tok.cuts_exact:
            return parts
        return [run for part in parts for run in (text_runs(part) if len(part) > RUN_CHARS else (part,))]

    def _segments(
        self, sites: list[_Site], prompts: list[str], pieces: list[DecisionPiece], shown: str
    ) -> tuple[Plan, list[int]]:
        """The plan: a segment per tree node, cut where the prompts under it part (DecisionReading.cut), and
        one per read; a node whose cut adds nothing takes no segment. Also each read's path length. The root
        is tokenized in two parts, cut where the state's text (`shown`) ends, so the plan knows how many of
        its ids come through the state (Plan.state_end: where a resumable state saves its point)."""
        under: dict[int, list[int]] = {}
        parent: dict[int, int] = {}
        for i, site in enumerate(sites):
            for d, node in enumerate(site.chain):
                under.setdefault(node, []).append(i)
                parent[node] = site.chain[d - 1] if d else -1
        cuts: dict[int, int] = {}
        spans: list[tuple[int, int, list[str]]] = []  # (node or -1 - read, parent node, its text's parts)
        head = 0  # the root's parts through the state's end
        for node in sorted(under):  # parents come first: their numbers are smaller
            source = prompts[under[node][0]]
            lo = cuts[parent[node]] if parent[node] >= 0 else 0
            cuts[node] = hi = self.r.cut([prompts[i] for i in under[node]], lo)
            parts = self._parts(source[lo:hi])
            at = source.find(shown, 0, hi) if parent[node] < 0 and shown else -1
            if at >= 0 and at + len(shown) < hi:
                state_cut = self.r.cut([source[: at + len(shown) + 1]], 0)
                parts = self._parts(source[:state_cut])
                head = len(parts)
                parts += self._parts(source[state_cut:hi])
            spans.append((node, parent[node], parts))
        for i, site in enumerate(sites):
            spans.append((-1 - i, site.chain[-1], self._parts(prompts[i][cuts[site.chain[-1]] :])))
        texts = [t for _, _, parts in spans for t in parts]
        ids = iter(self.r.tok.encode_template_batch(texts) if texts else [])
        plan = Plan()
        seg_of: dict[int, int] = {}
        lengths = [0] * len(sites)
        for node, up, parts in spans:
            encoded = [next(ids) for _ in parts]
            seg_ids = [t for e in encoded for t in e]
            above = seg_of.get(up, -1)
            if node >= 0:
                if up < 0 and head:
                    plan.state_end = sum(len(e) for e in encoded[:head])
                seg_of[node] = plan.segment(seg_ids, above, adopt=True) if seg_ids else above
                continue
            i = -1 - node
            seg = plan.segment(seg_ids, above, adopt=True)
            plan.reads.append((seg, dataclasses.replace(pieces[i], ids=tuple(seg_ids)), sites[i].path))
            lengths[i] = len(plan.path_ids(seg))
        return plan, lengths


def _common(a: str, b: str, most: int) -> int:
    """The length of a's and b's common prefix, at most `most` (a binary search over slices: C speed)."""
    lo, hi = 0, min(most, len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    while lo < hi:  # a[:lo] == b[:lo], a[:hi+1] != b[:hi+1]
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _logsumexp(xs: Sequence[float]) -> float:
    top = max(xs)
    if top == float("-inf"):
        return top
    return top + math.log(math.fsum(math.exp(x - top) for x in xs))


def _quote(qid: str) -> str:
    return json.dumps(qid, ensure_ascii=False)
