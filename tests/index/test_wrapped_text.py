"""Hard-wrapped text (issue 39, item 5): a line break inside a sentence is a space, a blank line or a
list item is a boundary; the ``ner`` extractor's facts are whole sentences, not line fragments."""
import re
from pathlib import Path

import pytest
from fakes import NgramEncoder, NoCallLLM

from hippo_engine import HippoRAG
from hippo_engine.ids import chunk_id
from hippo_engine.index.linebreaks import is_list_item, join_wrapped_lines
from hippo_engine.index.ner import NERExtractor, passage_title

NETPERF = """ NetPerfMeter is a network performance meter for the UDP,
 TCP, MPTCP, SCTP and DCCP transport protocols over IPv4 and IPv6.
 It simultaneously transmits bidirectional flows to an endpoint
 and measures the resulting flow bandwidths and QoS.
 .
 Features:
  - Support for multiple flows, each with its own frame rate and size, and
    for saving the results as vectors
  - Flow bandwidths are logged
 Written by Thomas Dreibholz of the Simula
 Research Laboratory in Oslo."""

DPKG_STATUS = Path("/var/lib/dpkg/status")
BULLET = re.compile(r"\s*(?:[-*+•]|\d{1,2}[.)])\s")
ENDS = (".", "!", "?", ":", ";", '."', ".)")


def test_wrapped_lines_join_into_one_line():
    assert join_wrapped_lines(NETPERF).split("\n") == [
        " NetPerfMeter is a network performance meter for the UDP, TCP, MPTCP, SCTP and DCCP transport protocols "
        "over IPv4 and IPv6. It simultaneously transmits bidirectional flows to an endpoint and measures the "
        "resulting flow bandwidths and QoS.",
        " .",
        " Features:",
        "  - Support for multiple flows, each with its own frame rate and size, and for saving the results as vectors",
        "  - Flow bandwidths are logged",
        " Written by Thomas Dreibholz of the Simula Research Laboratory in Oslo."]


def test_blank_lines_and_separators_are_boundaries():
    text = ("The first paragraph ends here without a full stop\n\nThe second paragraph starts\n"
            "on this line and goes on.\n--\nAnna")
    assert join_wrapped_lines(text) == ("The first paragraph ends here without a full stop\n\n"
                                        "The second paragraph starts on this line and goes on.\n--\nAnna")


def test_list_items_are_boundaries():
    text = ("Steps to follow when the server will not start\n1. stop the service and remove the old lock\n"
            "   file from the data folder\n2. start it again\na) or reboot\n(iv) or ask\n• or wait\n* or not\n"
            "+ done")
    assert join_wrapped_lines(text).split("\n") == [
        "Steps to follow when the server will not start",
        "1. stop the service and remove the old lock file from the data folder",
        "2. start it again", "a) or reboot", "(iv) or ask", "• or wait", "* or not", "+ done"]
    assert not is_list_item("e.g. the manual page") and not is_list_item("U.S. Army") and not is_list_item("-5 C")


def test_layouts_that_are_not_wrapping_are_left_as_they_are():
    one_line_paragraphs = "Lake Veloria\n" + "Lake Veloria lies in the Orsk Highlands. " * 4 + "\n" + "Deep. " * 20
    heading = ("INSTALLATION\nRun the installer from the folder you unpacked and follow what it\n"
               "asks; it needs no network.")
    colon = "The chorus is sung twice and reads as follows:\nWe are the river and the river is us"
    quoted = "He wrote back within the hour and said\n    that nothing had changed at all since then"
    for text in (one_line_paragraphs, colon, quoted):
        assert join_wrapped_lines(text) == text
    assert join_wrapped_lines(heading) == ("INSTALLATION\nRun the installer from the folder you unpacked and "
                                           "follow what it asks; it needs no network.")
    assert join_wrapped_lines("Title\nwrapped text that goes on\nonto a second line", keep_first=True) == \
        "Title\nwrapped text that goes on onto a second line"


def test_a_first_line_that_runs_on_is_no_title():
    assert passage_title(NETPERF) is None                                  # ends with a comma
    assert passage_title("rsync is a fast and versatile tool which can copy\nlocally and to or from a remote "
                         "host\nover any remote shell.") is None           # the next wrapped line goes on
    assert passage_title("Proceedings of the\nSociety of Antiquaries") is None     # ends with "of the"
    assert passage_title("Lake Veloria\nLake Veloria lies in the Orsk Highlands.") == "Lake Veloria"
    # a chunk cut mid-sentence under its title (the narrativeqa layout) keeps its title
    chunk = "All About Steve Script at IMSDb.\nbag , reads with re MARY " + "people do crossword puzzles " * 8
    assert passage_title(chunk) == "All About Steve Script at IMSDb."


def test_abbreviations_at_a_line_end_do_not_end_the_sentence():
    text = ("Velor Press\nThe printing house in the old town of Velor was founded by Dr.\nAnna Berg and her "
            "brother, who printed maps of the region, e.g.\nthe first atlas of the Orsk Highlands. It closed in\n"
            "1931.")
    facts = NERExtractor().run({"p": text})["p"]
    assert [h.text for h in facts] == ["Velor Press", "The printing house in the old town of Velor was founded by "
                                       "Dr. Anna Berg and her brother, who printed maps of the region, e.g. the "
                                       "first atlas of the Orsk Highlands.", "It closed in 1931."]
    assert "Anna Berg" in facts[1].entities and "1931" in facts[2].entities


def package_descriptions(limit: int) -> dict[str, str]:
    """The first ``limit`` installed Debian packages (by name) with a description of 4+ lines, as
    ``"package\\nsummary\\n wrapped text"`` documents (the control file's own layout)."""
    if not DPKG_STATUS.is_file():
        pytest.skip(f"{DPKG_STATUS} is absent (not a Debian system): no real hard-wrapped package descriptions")
    docs: dict[str, list[str]] = {}
    package, current = None, None
    for line in DPKG_STATUS.read_text(encoding="utf-8").splitlines():
        if line.startswith("Package: "):
            package = line.split(": ", 1)[1]
        elif line.startswith("Description: ") and package:
            current = docs[package] = [package, line.split(": ", 1)[1]]
        elif current is not None and line.startswith(" "):
            current.append(line)
        else:
            current = None
    out = {k: "\n".join(v) for k, v in sorted(docs.items()) if len(v) >= 5}
    if len(out) < 5:
        pytest.skip(f"{DPKG_STATUS} has only {len(out)} packages with multi-line descriptions")
    return dict(list(out.items())[:limit])


def test_real_wrapped_documents_give_facts_that_do_not_end_at_a_line_break(tmp_path):
    """Index real package descriptions (wrapped at ~80 columns) with the default ``ner`` extractor:
    no fact but the title line ends at a line break inside a paragraph of the description (the next
    line is text of the same paragraph, not ``" ."`` nor a list item) unless it ends a sentence, and
    facts that cross a line break exist."""
    docs = package_descriptions(60)
    rag = HippoRAG(tmp_path, extractor="ner", llm=NoCallLLM(), encoder=NgramEncoder(), show_progress=False)
    rag.index(list(docs.values()))
    facts = {text: [h.text for h in rag.index_state.passage_hyperedges[chunk_id(text)]] for text in docs.values()}
    assert all(facts.values()) and not any("\n" in f for fs in facts.values() for f in fs)
    crossing, fragments = 0, []
    for text, fs in facts.items():
        title = passage_title(text)                          # the package name ("g++" is none)
        assert title is None or fs[0] == title
        for fact in fs[title is not None:]:
            m = re.search(r"\s+".join(map(re.escape, fact.split())), text)
            assert m is not None, fact
            crossing += "\n" in m.group()
            line = text[:m.end()].rsplit("\n", 1)[-1]
            following = text[m.end():].split("\n", 2)[1] if text[m.end():].startswith("\n") else None
            if (following is not None and line.startswith(" ") and following.startswith(" ")
                    and following.strip() != "." and not BULLET.match(following) and not fact.endswith(ENDS)):
                fragments.append((fact, following))     # the paragraph goes on, the sentence did not end
    assert fragments == [], "\n".join(map(repr, fragments))
    assert crossing >= 20
