"""``python -m reproduce ppr-musique`` (reproduce/ppr_musique.py) on the toy corpus: the default
solver is the exact kernel on a graph this small (same hash), forced push at a tight r_max ranks
as exact, and the table is written."""
import shutil

from fakes import NgramEncoder, ScriptedLLM
from helpers import CORPUS, toy_respond
from toy_tables import make_dataset

from hippo_engine import HippoRAG
from reproduce import ppr_musique
from reproduce.cli import build_parser


def test_command_on_the_toy_corpus(tmp_path, capsys):
    data = make_dataset(tmp_path / "data" / "toyset")
    gen = HippoRAG(tmp_path / "gen", llm=ScriptedLLM(toy_respond), encoder=NgramEncoder(), show_progress=False)
    gen.index(CORPUS)
    gen.close()
    (openie,) = (tmp_path / "gen").glob("openie_results_ner_*.json")
    shutil.copy(openie, data / "openie_toyset_results.json")
    out = tmp_path / "out.md"
    argv = ["ppr-musique", "--variant", "openie", "--data", str(data), "--work", str(tmp_path / "work"),
            "--r-max", "1e-10", "--out", str(out)]
    assert ppr_musique.run(build_parser().parse_args(argv), argv, encoder=NgramEncoder()) == 0
    rows = {ln.split(" | ")[1]: ln.split(" | ") for ln in out.read_text().splitlines() if ln.startswith("| openie")}
    assert set(rows) == {"auto", "exact", "push"}
    assert rows["auto"][8] == rows["exact"][8]                  # same rankings hash
    assert rows["auto"][7] == rows["exact"][7] == rows["push"][7] == "1.0"   # same top 10 as exact
    assert "python -m reproduce ppr-musique --variant openie" in out.read_text()
    assert "auto:" in capsys.readouterr().out.replace("openie auto:", "auto:")
