#!/usr/bin/env bash
# Wheel smoke job: build the wheel, install it into a fresh virtualenv, and from a directory
# outside the source tree check the version, the packaged prompts, OpenIE against a scripted
# OpenAI-compatible server on 127.0.0.1, and retrieval.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
server_pid=""
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"' EXIT

python3 -m pip wheel -q --no-deps -w "$work/dist" "$repo"
whl="$(ls "$work"/dist/hippo_engine-*.whl)"
python3 - "$whl" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
assert tops == {"hippo_engine"}, f"wheel installs top-level names {sorted(tops)}"
for f in ("openie_ner.json", "openie_triples.json", "qa_system.txt", "filter_program.json"):
    assert f"hippo_engine/prompts/{f}" in names, f"{f} missing from the wheel"
print(f"wheel ok: {len(names)} files, top level {sorted(tops)}")
PY
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q -c "$repo/constraints.txt" "$whl"
cd "$work"
bin="$work/venv/bin"
"$bin/hippo-engine" --version
"$bin/python" - <<'PY'
import importlib.util
from hippo_engine.prompts import load_json_prompt
from hippo_engine.retrieve.facts.recognition import RecognitionFilter  # noqa: F401 (imports dspy)
assert load_json_prompt("openie_ner.json")["system"]
for name in ("evaluation", "reproduce", "prompts"):
    assert importlib.util.find_spec(name) is None, f"generic top-level module {name!r} is installed"
print("packaged prompts load; no generic top-level modules")
PY
cat > corpus.json <<'JSON'
["Ilse Marrow\nIlse Marrow founded the Vellmar Observatory in Kaldavia.",
 "Vellmar Observatory\nThe Vellmar Observatory stands on Mount Caldis in Kaldavia.",
 "Orsk Highlands\nThe Orsk Highlands lie north of Mount Caldis."]
JSON
echo '["On which mountain is the observatory that Ilse Marrow founded?"]' > queries.json
"$bin/python" "$repo/.ci/smoke_server.py" port.txt &
server_pid=$!
for _ in $(seq 50); do [ -s port.txt ] && break; sleep 0.1; done
url="http://127.0.0.1:$(cat port.txt)/v1"
"$bin/hippo-engine" index corpus.json --save-dir idx --llm smoke-model --llm-base-url "$url" --quiet
"$bin/hippo-engine" stats --save-dir idx
"$bin/hippo-engine" retrieve --save-dir idx --queries queries.json --no-filter --top-k 2 \
  --llm smoke-model --llm-base-url "$url" --quiet --output out.json
"$bin/python" - <<'PY'
import json
out = json.load(open("out.json"))
docs = out["solutions"][0]["docs"]
assert docs and docs[0].startswith(("Vellmar Observatory", "Ilse Marrow")), docs
print("retrieval ok:", [d.split(chr(10))[0] for d in docs])
PY
echo "wheel smoke job passed"
