"""The question sets and the answer checks of ``python -m reproduce reader-choice``.

Three question sets, each retrieved once without an LLM (every reader then sees the same top 5 passages):

* ``sample``: the bundled sample corpus (``hippo_engine/data/sample_corpus.json``, what ``hippo-engine demo``
  indexes), on an ``extractor="ner"`` index;
* ``musique``: the first MuSiQue train questions on the ``rankings`` command's openie index (released
  OpenIE imported, filter off);
* ``packages``: the Debian package descriptions of ``/var/lib/dpkg/status`` on the machine that runs it
  (real text hard-wrapped at about 72 columns), one document per package, on an ``extractor="ner"``
  index, with the questions of ``reader_questions_packages.json`` (each answered by one package name).

The answer checks are the measurement's own, independent of the reader code being measured, so a run
against an older checkout is judged the same way: :func:`fragment` tells an answer that stops inside
what the model wrote (a clause, a word, or the reply cut by the token cap) from one that is a whole
answer line or sentence.
"""
from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path

PACKAGES_QUESTIONS = Path(__file__).with_name("reader_questions_packages.json")
DPKG_STATUS = Path("/var/lib/dpkg/status")

_ANSWER_MARK = re.compile(r"answer\s*[*_]*\s*:", re.IGNORECASE)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_WORD = re.compile(r"\w+")
#: what may follow the last word of a whole answer before its line or sentence ends
#: a name this short followed by a clause mark ("mosh, which ...") is a whole answer
SHORT_HEAD = 5
_CLAUSE = re.compile(r"\s*(?:[,;(]|-\s|–|which\b|who\b)")
_TRAILER = re.compile(r"""^[ \t*_`"'”’)\]]*(?:\[[\d, ]+\][ \t*_`"'”’)]*)*""")


# ----------------------------------------------------------------------------- packages corpus
def dpkg_documents(status: Path = DPKG_STATUS, limit: int = 1500) -> list[str]:
    """The first ``limit`` packages of a dpkg status file as ``"name\\nsynopsis\\nlong description"``
    (the long description's lines as they are wrapped there, its ``.`` lines blank)."""
    docs: list[str] = []
    for stanza in status.read_text("utf-8", "replace").split("\n\n"):
        name, lines, in_desc = "", [], False
        for line in stanza.splitlines():
            if line.startswith("Package:"):
                name = line.split(":", 1)[1].strip()
            elif line.startswith("Description:"):
                in_desc, lines = True, [line.split(":", 1)[1].strip()]
            elif in_desc and line.startswith(" "):
                lines.append("" if line.strip() == "." else line[1:])
            else:
                in_desc = False
        if name and lines:
            docs.append(name + "\n" + "\n".join(lines))
        if len(docs) >= limit:
            break
    return docs


def package_questions(path: Path = PACKAGES_QUESTIONS) -> tuple[list[str], list[list[str]]]:
    """The package questions and their gold answers."""
    data = json.loads(path.read_text("utf-8"))
    return [q["question"] for q in data["questions"]], [q["answers"] for q in data["questions"]]


# ----------------------------------------------------------------------------- answer checks
def _fold(word: str) -> str:
    return unicodedata.normalize("NFKD", word).encode("ascii", "ignore").decode("ascii").lower()


def _answer_region(reply: str) -> str:
    """The part of a reply an answer is taken from: after its last ``Answer:`` mark, else all of it."""
    body = _THINK.sub("", reply or "")
    marks = list(_ANSWER_MARK.finditer(body))
    return body[marks[-1].end():] if marks else body


def fragment(answer: str, reply: str, finish_reason: str | None) -> bool:
    """Whether a non-empty ``answer`` is a piece cut out of what the model wrote: its words, found in the
    reply's answer region, are followed by more of the same line and sentence (a word, or a clause
    after more than ``SHORT_HEAD`` words), or run to the end of a reply the token cap cut off. An
    answer not found in the reply (rewritten by the reader) is judged by its own last character: a
    comma, colon or hyphen ends no answer."""
    words = [_fold(w) for w in _WORD.findall(answer or "")]
    if not words:
        return False
    region = _answer_region(reply)
    spans = list(_WORD.finditer(region))
    folded = [_fold(m.group()) for m in spans]
    for i in range(len(folded) - len(words) + 1):
        if folded[i:i + len(words)] == words:
            after = region[spans[i + len(words) - 1].end():]
            rest = after[_TRAILER.match(after).end():]      # type: ignore[union-attr]
            if rest.startswith(("\n", "\r")) or re.match(r"[.!?](?:\s|$)", rest):
                return False
            if not rest.strip():
                return finish_reason == "length"
            return not (len(words) <= SHORT_HEAD and _CLAUSE.match(rest))
    return answer.rstrip()[-1:] in {",", ":", ";", "-"}


def words(text: str) -> int:
    """Whitespace-separated words."""
    return len((text or "").split())
