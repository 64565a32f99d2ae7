"""Fuzzing every parser of model output with generated replies; counts exceptions that escape.

    python -m reproduce fuzz-parsers [--samples 100000] [--seed 0] [--filter-every 20]

Each generated reply goes through every parser of model text: the lenient JSON reader
(``text.parse_json_lenient``), OpenIE NER and triples (``parse_ner``/``parse_triples``, which
never raise, and the strict ``read_ner``/``read_triples``), the n-ary reply (``parse_nary``, also
as a reply cut off by the token limit), the recognition filter's fact list (``parse_fact_list``)
and, every ``--filter-every``-th reply, the whole DSPy recognition filter on an LLM that returns
it (documented never to raise), the reader's answer (``parse_answer``) and the community report
(``parse_report``). A parser documented to raise ``ValueError`` on an unreadable reply may do so;
any other exception, a wrong result type or a call over ``--call-limit`` seconds is a finding.

Replies come from seeded generators of our own: random JSON values (deep, wide, odd numbers,
escapes), the shapes each prompt asks for with random damage, brackets nested up to thousands
deep, truncations, random bytes decoded in several ways (lone surrogates included), random
Unicode, and now and then a string of 0.2 to 1 million characters.
"""
from __future__ import annotations

import argparse
import json
import random
import signal
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from ..harness import report_options
from .reliability import header, load_line, write_reports

TOKENS = ['[', ']', '{', '}', '"', ',', ':', ' ', '\n', '\\', 'a', '1', '-', '.', 'e', 'null', 'true', 'NaN',
          'Infinity', '1e999', '-0', '"x"', '"named_entities"', '"triples"', '"segments"', '"entities"', '"title"',
          '"summary"', '"findings"', '"rating"', '"fact"', '```json', '```', 'Answer:', '**Answer:**', '<think>',
          '</think>', '[[ ## relevant_facts ## ]]', '[[ ## completed ## ]]', '\\ud800', '\\u0000', '\ud800',
          '\x00', '\u202e', '\ufeff', 'é', '日本', '🙂']


class _Timeout(Exception):
    """A parser call ran past the per-call limit."""


# ----------------------------------------------------------------------------- generators
def _rand_str(rng: random.Random, n: int) -> str:
    kind = rng.random()
    if kind < 0.5:
        return "".join(rng.choice("abcdefghij KLMNO 0123-_.'\"\\/") for _ in range(n))
    if kind < 0.8:
        return "".join(chr(rng.randint(0x20, 0x2FFF)) for _ in range(n))
    return "".join(chr(rng.randint(0, 0x10FFFF)) for _ in range(n))       # surrogates and controls too


def _json_value(rng: random.Random, depth: int) -> object:
    r = rng.random()
    if depth <= 0 or r < 0.35:
        return rng.choice([None, True, False, rng.randint(-10 ** 20, 10 ** 20), rng.uniform(-1e308, 1e308),
                           float("nan"), float("inf"), _rand_str(rng, rng.randint(0, 30)), "", 0, -0.0])
    if r < 0.65:
        return [_json_value(rng, depth - 1) for _ in range(rng.randint(0, 6))]
    keys = ["named_entities", "triples", "segments", "entities", "title", "summary", "findings", "rating",
            "fact", "facts", "answer", "subject", "predicate", "object"]
    return {(rng.choice(keys) if rng.random() < 0.7 else _rand_str(rng, 5)): _json_value(rng, depth - 1)
            for _ in range(rng.randint(0, 5))}


def _dumps(rng: random.Random, value: object) -> str:
    return json.dumps(value, ensure_ascii=rng.random() < 0.5, allow_nan=True)


def _shaped(rng: random.Random) -> str:
    """What a prompt asks for: NER, triples, n-ary segments, a fact list, an answer, a report."""
    ents = [_rand_str(rng, rng.randint(0, 12)) for _ in range(rng.randint(0, 6))]
    kind = rng.randrange(6)
    if kind == 0:
        return _dumps(rng, {"named_entities": ents})
    if kind == 1:
        return _dumps(rng, {"triples": [[rng.choice(ents or ["x"]), _rand_str(rng, 6), rng.choice(ents or ["y"])]
                                        for _ in range(rng.randint(0, 5))]})
    if kind == 2:
        segs = [{"text": _rand_str(rng, 20), "entities": [{"name": e, "type": "PERSON", "score": rng.randint(-5, 15)}
                                                          for e in ents]} for _ in range(rng.randint(0, 3))]
        return _dumps(rng, {"segments": segs})
    if kind == 3:
        facts = [[_rand_str(rng, 4), _rand_str(rng, 4), _rand_str(rng, 4)] for _ in range(rng.randint(0, 4))]
        return f"[[ ## relevant_facts ## ]]\n{_dumps(rng, {'fact': facts})}\n\n[[ ## completed ## ]]"
    if kind == 4:
        return f"<think>{_rand_str(rng, 30)}</think> Answer: {_rand_str(rng, rng.randint(0, 20))}."
    return _dumps(rng, {"title": _rand_str(rng, 10), "summary": _rand_str(rng, 40), "rating": _json_value(rng, 1),
                        "findings": [{"summary": _rand_str(rng, 10), "explanation": _rand_str(rng, 30)}]})


def _damage(rng: random.Random, text: str) -> str:
    """Random edits: cut, delete, insert, swap, repeat."""
    s = list(text)
    for _ in range(rng.randint(1, 6)):
        op = rng.randrange(5)
        i = rng.randint(0, len(s))
        if op == 0:
            s = s[:i]
        elif op == 1 and s:
            del s[i:i + rng.randint(1, 5)]
        elif op == 2:
            s[i:i] = list(rng.choice(TOKENS))
        elif op == 3 and len(s) > 1:
            j = rng.randrange(len(s))
            s[min(i, len(s) - 1)], s[j] = s[j], s[min(i, len(s) - 1)]
        else:
            s[i:i] = s[i:i + rng.randint(1, 20)] * rng.randint(2, 50)
    return "".join(s)


def _deep(rng: random.Random) -> str:
    n = rng.choice([rng.randint(1, 200), rng.randint(200, 5000), rng.randint(5000, 20000)])
    unit = rng.choice(["[", '{"a":', '{"triples":[', '[{"x":', "[[", '"'])
    body = unit * n
    if rng.random() < 0.4:
        closing = {"[": "]", '{"a":': "}", '{"triples":[': "]}", '[{"x":': "}]", "[[": "]]", '"': '"'}[unit]
        body += "1" + closing * rng.randint(0, n)
    return rng.choice(["", "```json\n", "Here you go: "]) + body


def _bytes(rng: random.Random) -> str:
    raw = rng.randbytes(rng.randint(0, 300))
    how = rng.randrange(4)
    if how == 0:
        return raw.decode("utf-8", errors="surrogateescape")     # lone surrogates
    if how == 1:
        return raw.decode("latin-1")
    if how == 2:
        return raw.decode("utf-16-le", errors="replace")
    return raw.decode("utf-8", errors="ignore")


def _huge(rng: random.Random) -> str:
    n = rng.randint(200_000, 1_000_000)
    return rng.choice([lambda: '{"named_entities": ["' + "a" * n + '"]}', lambda: "[" + "1," * (n // 2) + "1]",
                       lambda: "Answer: " + "x " * (n // 2), lambda: '{"title": "' + "t" * n])()


GENERATORS: dict[str, Callable[[random.Random], str]] = {
    "random_json": lambda rng: _dumps(rng, _json_value(rng, rng.randint(0, 8))),
    "shaped": _shaped,
    "shaped_damaged": lambda rng: _damage(rng, _shaped(rng)),
    "truncated": lambda rng: (lambda t: t[:rng.randint(0, len(t))])(_shaped(rng)),
    "token_soup": lambda rng: "".join(rng.choice(TOKENS) for _ in range(rng.randint(0, 300))),
    "deep": _deep,
    "bytes_decoded": _bytes,
    "unicode": lambda rng: _rand_str(rng, rng.randint(0, 400)),
    "fenced_prose": lambda rng: f"{_rand_str(rng, 20)}\n```json\n{_dumps(rng, _json_value(rng, 3))}\n```\n"
                                f"{_rand_str(rng, 20)}",
}


def generate(rng: random.Random, n: int, huge_every: int) -> Iterator[tuple[str, str]]:
    """``n`` (generator name, reply) pairs; every ``huge_every``-th is a string of up to a megabyte."""
    names = list(GENERATORS)
    for i in range(n):
        if huge_every and i % huge_every == huge_every - 1:
            yield "huge", _huge(rng)
        else:
            name = rng.choice(names)
            yield name, GENERATORS[name](rng)


# ----------------------------------------------------------------------------- parsers
def parsers(filter_every: int) -> list[tuple[str, Callable[[str], object], tuple, type | tuple, int]]:
    """(name, call, exceptions it may raise, result type, run every n-th reply)."""
    from hippo_engine.hirag.reports import parse_report
    from hippo_engine.index.nary_parse import NaryParse, parse_nary
    from hippo_engine.index.openie import parse_ner, parse_triples, read_ner, read_triples
    from hippo_engine.lenient_json import parse_json_lenient
    from hippo_engine.llm.base import LLMClient, LLMResponse
    from hippo_engine.qa.reader import parse_answer
    from hippo_engine.retrieve.facts.recognition import RecognitionFilter, parse_fact_list

    class Echo(LLMClient):
        model_name, reply = "fuzz-echo", ""

        def generate(self, messages, *, max_new_tokens=None, temperature=None):
            return LLMResponse(self.reply)

    echo = Echo()
    flt = RecognitionFilter(echo)
    facts = [("ada quell", "founded", "arvel"), ("arvel", "lies north of", "brintor")]

    def whole_filter(text: str):
        echo.reply = text
        return flt.filter("Who founded Arvel?", facts)

    return [
        ("parse_json_lenient", parse_json_lenient, (ValueError,), object, 1),
        ("parse_ner", parse_ner, (), list, 1),
        ("parse_triples", parse_triples, (), list, 1),
        ("read_ner", read_ner, (ValueError,), list, 1),
        ("read_triples", read_triples, (ValueError,), list, 1),
        ("parse_nary", parse_nary, (), NaryParse, 1),
        ("parse_nary(cut_off)", lambda t: parse_nary(t, cut_off=True), (), NaryParse, 1),
        ("parse_fact_list", parse_fact_list, (ValueError,), tuple, 1),
        ("RecognitionFilter.filter", whole_filter, (), tuple, filter_every),
        ("parse_answer", parse_answer, (), str, 1),
        ("parse_report", parse_report, (ValueError,), dict, 1),
    ]


def _alarm(_sig, _frame):
    raise _Timeout()


def fuzz(samples: int, seed: int, filter_every: int, huge_every: int, call_limit: float,
         progress: Callable[[str], None] = print, findings_file: Path | None = None) -> dict:
    """Run the fuzz; returns counts per parser and per generator, and the first findings. Each
    finding is also appended to ``findings_file`` (JSON lines) with its whole input, for a repro."""
    import logging
    logging.getLogger("hippo_engine").setLevel(logging.CRITICAL)   # parsers warn on every bad reply
    rng = random.Random(seed)
    table = parsers(filter_every)
    stats = {name: Counter() for name, *_ in table}
    slowest = dict.fromkeys(stats, 0.0)
    gens: Counter[str] = Counter()
    findings: list[dict] = []
    old = signal.signal(signal.SIGALRM, _alarm)
    t0 = time.perf_counter()
    try:
        for i, (gen, text) in enumerate(generate(rng, samples, huge_every)):
            gens[gen] += 1
            n_found = len(findings)
            for name, fn, allowed, rtype, every in table:
                if i % every:
                    continue
                c = stats[name]
                c["calls"] += 1
                t = time.perf_counter()
                signal.setitimer(signal.ITIMER_REAL, call_limit)
                try:
                    out = fn(text)
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    if not isinstance(out, rtype):
                        c["wrong_type"] += 1
                        findings.append({"parser": name, "generator": gen, "what": f"returned {type(out).__name__}",
                                         "input": text[:300]})
                except allowed:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    c["documented_ValueError"] += 1
                except _Timeout:
                    c["over_call_limit"] += 1
                    findings.append({"parser": name, "generator": gen, "what": f"over {call_limit} s",
                                     "input_len": len(text), "input": text[:300]})
                except BaseException as e:  # noqa: BLE001 - an escaping exception is the finding
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    if isinstance(e, KeyboardInterrupt):
                        raise
                    c["escaped"] += 1
                    c[f"escaped_{type(e).__name__}"] += 1
                    if sum(f["parser"] == name for f in findings) < 5:
                        findings.append({"parser": name, "generator": gen, "what": f"{type(e).__name__}: {e}"[:300],
                                         "input_len": len(text), "input": text[:300],
                                         "where": traceback.format_exc(limit=-3)[-800:]})
                slowest[name] = max(slowest[name], time.perf_counter() - t)
            if findings_file is not None and len(findings) > n_found:
                with open(findings_file, "a", encoding="utf-8") as f:
                    for item in findings[n_found:]:
                        f.write(json.dumps({**item, "sample": i, "input": text}, ensure_ascii=True) + "\n")
            if (i + 1) % 10000 == 0:
                esc = sum(c["escaped"] for c in stats.values())
                progress(f"{i + 1}/{samples} replies, {esc} escaped so far, {time.perf_counter() - t0:.0f} s "
                         f"({load_line()})")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    return {"samples": samples, "seed": seed, "elapsed_s": round(time.perf_counter() - t0, 1), "load": load_line(),
            "parsers": {k: dict(v) for k, v in stats.items()}, "slowest_call_s": {k: round(v, 3) for k, v in
                                                                                  slowest.items()},
            "generators": dict(gens), "findings": findings[:50],
            "escaped_total": sum(c["escaped"] for c in stats.values()),
            "over_limit_total": sum(c["over_call_limit"] for c in stats.values()),
            "wrong_type_total": sum(c["wrong_type"] for c in stats.values())}


def render(res: dict, command: str) -> str:
    """The markdown report: one line per parser, then the generators and the findings."""
    lines = [header("Model-output parsers under fuzzing", command),
             f"{res['samples']:,} generated replies (seed {res['seed']}), {res['elapsed_s']} s\n",
             "| parser | calls | escaped exceptions | documented ValueError | wrong type | over limit | slowest s |",
             "|---|---|---|---|---|---|---|"]
    for name, c in res["parsers"].items():
        lines.append(f"| {name} | {c.get('calls', 0):,} | {c.get('escaped', 0)} | {c.get('documented_ValueError', 0):,}"
                     f" | {c.get('wrong_type', 0)} | {c.get('over_call_limit', 0)} | {res['slowest_call_s'][name]} |")
    lines += ["", "Replies per generator: " + ", ".join(f"{k} {v:,}" for k, v in sorted(res["generators"].items())),
              "", f"**{res['escaped_total']} escaping exceptions**, {res['wrong_type_total']} wrong result types, "
              f"{res['over_limit_total']} calls over the limit."]
    if res["findings"]:
        lines += ["", "Findings (first of each):", ""] + [f"* {json.dumps(f, ensure_ascii=True)[:700]}"
                                                          for f in res["findings"][:15]]
    return "\n".join(lines) + "\n"


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``fuzz-parsers`` command's options."""
    ap.add_argument("--samples", type=int, default=100_000, help="generated replies (default 100000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--filter-every", type=int, default=20, help="the whole DSPy filter on every n-th reply "
                    "(default 20; it is ~100x slower than the other parsers)")
    ap.add_argument("--huge-every", type=int, default=5000,
                    help="a reply of up to a megabyte every n-th (default 5000)")
    ap.add_argument("--call-limit", type=float, default=20.0, help="seconds one parser call may take (default 20)")
    ap.add_argument("--findings", type=Path, default=Path("outputs/fuzz_parsers/findings.jsonl"),
                    help="every finding with its whole input, as JSON lines (default %(default)s)")
    report_options(ap, "fuzz_parsers")


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Fuzz, print and write the report; exit 1 on any finding."""
    args.findings.parent.mkdir(parents=True, exist_ok=True)
    args.findings.unlink(missing_ok=True)
    res = fuzz(args.samples, args.seed, args.filter_every, args.huge_every, args.call_limit,
               progress=lambda s: print(s, flush=True), findings_file=args.findings)
    text = render(res, f"python -m reproduce {' '.join(argv)}")
    kw = {"out_dir": args.out_dir} if args.out_dir else {}
    md, js = write_reports(args.name, text, res, **kw)
    print(text)
    print(f"written: {md}, {js}")
    return 1 if res["escaped_total"] or res["wrong_type_total"] or res["over_limit_total"] else 0


if __name__ == "__main__":
    raise SystemExit("run: python -m reproduce fuzz-parsers")
