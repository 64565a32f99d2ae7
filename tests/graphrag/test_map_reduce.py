"""The map replies of graphrag_global are read leniently and never evaluated; points are selected by score
under the reduce budget (hippo_engine.graphrag.map_reduce)."""
from __future__ import annotations

from hippo_engine.graphrag.map_reduce import Point, map_messages, parse_points, reduce_messages, select_points
from hippo_engine.hirag.report_context import whitespace_tokens


def test_parse_points_reads_json_in_its_usual_disguises():
    assert parse_points('{"points": [{"description": "A", "score": 80}]}') == [Point("A", 80.0)]
    fenced = 'Here you go:\n```json\n{"points": [{"description": "B  c", "score": "75"}]}\n```'
    assert parse_points(fenced, batch=2) == [Point("B c", 75.0, 2)]
    assert parse_points('[{"description": "C", "score": 150}, {"description": "D", "score": -3}]') == [
        Point("C", 100.0), Point("D", 0.0)]
    truncated = '{"points": [{"description": "E", "score": 60}, {"description": "F", "sco'
    assert parse_points(truncated) == [Point("E", 60.0)]
    bad = '{"points": [{"description": "x", "score": "high"}, {"score": 3}, 7, {"description": ""}]}'
    assert parse_points(bad) == []


def test_parse_points_falls_back_to_scored_lines_and_never_evaluates():
    text = "- Oren Pike founded it (score: 90)\n2. Brask is a city [score=40]\nno score here"
    assert parse_points(text) == [Point("Oren Pike founded it", 90.0), Point("Brask is a city", 40.0)]
    assert parse_points("__import__('os').system('false')") == []
    assert parse_points("") == [] and parse_points(None) == []


def test_select_points_keeps_positive_best_first_under_the_budget():
    pts = [Point("a b", 50, 0), Point("c", 0, 0), Point("d e f", 90, 1), Point("g", 50, 1), Point("h i j k", 70, 0)]
    assert select_points(pts, whitespace_tokens, 100) == [pts[2], pts[4], pts[0], pts[3]]
    assert select_points(pts, whitespace_tokens, 7) == [pts[2], pts[4]]
    assert select_points([], whitespace_tokens, 10) == []


def test_prompts_carry_the_question_reports_points_and_response_type():
    m = map_messages("Who?", ["# R1 text", "# R2 text"])
    assert "Who?" in m[-1]["content"] and "# R1 text\n\n# R2 text" in m[-1]["content"] and "JSON" in m[0]["content"]
    r = reduce_messages("Who?", [Point("A", 80)], "one line")
    assert "Write one line." in r[0]["content"] and "- [score 80] A" in r[-1]["content"]
    assert "(no points)" in reduce_messages("Who?", [], "x")[-1]["content"]
