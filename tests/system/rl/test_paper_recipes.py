"""Each paper recipe's one command, as its config docstring writes it (AWPO, SAW, VPO; ParetoPO's is
``tests/system/rl/test_e2e.py::test_paper_scale_dry_run_on_8_devices``), from a Hugging Face
directory for 8 host devices. AWPO's runs as a dry run: the run validates, reads the model from the
directory's ``config.json`` and compiles its update and sampler with explicit shardings (Qwen3-4B).
SAW's (Qwen2.5-1.5B: the family and size of ParetoPO's compiled dry run) and VPO's (AWPO's shapes)
are validated and their models read in-process, without another compile (paper-scale dry runs
compile once per engine and architecture; issue 46).

The directory holds the paper model's public ``config.json`` (the values of the Hub repo named in
``HF_CONFIGS``) and the real Qwen2 tokenizer files of the shared assets (Qwen2.5 and Qwen3 share its
byte-level BPE; the dry run uses it to measure the longest prompt). There are no weights: a dry run
reads none. The ToolRL data paths point at the shared rlla_4k test split, the only one here.
Reference for the parameter count: transformers' own model built from the same ``config.json`` on
the meta device (no memory).
"""

import ast
import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

REPO = pathlib.Path(__file__).resolve().parents[3]

_QWEN3 = {  # keys every Qwen3 dense config.json carries
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "model_type": "qwen3",
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "sliding_window": None,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
_QWEN3_4B = dict(
    hidden_size=2560,
    intermediate_size=9728,
    num_attention_heads=32,
    num_hidden_layers=36,
    max_window_layers=36,
    num_key_value_heads=8,
    tie_word_embeddings=True,
)
#: The public config.json of each paper model, by the Hub repo's name (the checkpoint folder).
HF_CONFIGS = {
    # AWPO's headline model (arXiv:2512.19126, Tables 1-5): Qwen/Qwen3-4B-Instruct-2507
    "Qwen3-4B-Instruct-2507": {
        **_QWEN3,
        **_QWEN3_4B,
        "max_position_embeddings": 262144,
        "rope_theta": 5000000,
    },
    # SAW's ToolRL model (arXiv:2606.07705, Sec. 5.1): Qwen/Qwen2.5-1.5B-Instruct
    "Qwen2.5-1.5B-Instruct": {
        "architectures": ["Qwen2ForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "hidden_act": "silu",
        "hidden_size": 1536,
        "initializer_range": 0.02,
        "intermediate_size": 8960,
        "max_position_embeddings": 32768,
        "max_window_layers": 21,
        "model_type": "qwen2",
        "num_attention_heads": 12,
        "num_hidden_layers": 28,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "sliding_window": 32768,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 151936,
    },
    # VPO's maze model (arXiv:2605.22817, Table 2): Qwen/Qwen3-4B
    "Qwen3-4B": {
        **_QWEN3,
        **_QWEN3_4B,
        "max_position_embeddings": 40960,
        "rope_theta": 1000000,
    },
}


def documented_command(name: str) -> list[str]:
    """The flags of the one paper-scale training command in ``configs/<name>.py``'s docstring
    (the line with ``--workdir=/runs/``), after ``python -m mojax.main``."""
    doc = ast.get_docstring(ast.parse((REPO / "configs" / f"{name}.py").read_text())) or ""
    lines = [x.strip() for x in doc.splitlines() if "--workdir=/runs/" in x and "paper=true" in x]
    assert len(lines) == 1, f"configs/{name}.py documents {len(lines)} paper commands: {lines}"
    words = shlex.split(lines[0])
    assert words[:3] == ["python", "-m", "mojax.main"], words
    return words[3:]


def dry_run_flags(flags: list[str], tmp_path: pathlib.Path, shared, tokenizer_dir):
    """``flags`` made to run here: the checkpoint becomes a Hugging Face directory under
    ``tmp_path`` (``HF_CONFIGS``' config.json + the tokenizer files), the ToolRL paths the shared
    test split, the workdir ``tmp_path``; then an 8-device mesh and ``--config.dry_run=true``.
    Returns ``(flags, the HF directory)``."""
    out, hf_dir = [], None
    for flag in flags:
        if flag.startswith("--workdir="):
            flag = f"--workdir={tmp_path / 'workdir'}"
        elif flag.startswith("--config=configs/"):
            path, _, arg = flag.partition(":")
            items = []
            for item in arg.split(","):
                key, _, value = item.partition("=")
                if key == "checkpoint":
                    hf_dir = tmp_path / pathlib.PurePosixPath(value).name
                    hf_dir.mkdir()
                    for f in tokenizer_dir.iterdir():
                        if f.name != "config.json":  # the Qwen2-1.5B-Instruct one
                            shutil.copy(f, hf_dir / f.name)
                    (hf_dir / "config.json").write_text(json.dumps(HF_CONFIGS[hf_dir.name]))
                    value = str(hf_dir)
                elif key in ("train_path", "eval_path"):
                    assert "rlla_4k" in value, value
                    value = str(shared / "data" / "toolrl" / "test.parquet")
                items.append(f"{key}={value}")
            flag = f"{path}:{','.join(items + ['data=2', 'fsdp=4'])}"
        out.append(flag)
    assert hf_dir is not None, "the paper command names no checkpoint=..."
    return out + ["--config.dry_run=true"], hf_dir


def transformers_param_count(hf_config: dict) -> int:
    """Parameters of transformers' model for ``hf_config`` (tied weights counted once)."""
    config = transformers.AutoConfig.for_model(**hf_config)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.slow
@pytest.mark.parametrize("name", ["awpo"])  # Qwen3-4B; SAW's and VPO's commands: below
def test_paper_command_dry_runs_from_an_hf_directory_on_8_devices(
    name, tmp_path, shared, qwen2_tokenizer_dir
):
    flags, hf_dir = dry_run_flags(documented_command(name), tmp_path, shared, qwen2_tokenizer_dir)
    expected = transformers_param_count(HF_CONFIGS[hf_dir.name])
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    p = subprocess.run(
        [sys.executable, "-m", "mojax.main", *flags],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:]
    head = f"(8 devices), model {hf_dir} ({expected / 1e9:.3f}B params, bfloat16 compute / float32"
    assert head in out, out[-3000:]
    assert "lowered with explicit shardings: OK" in out
    assert not (tmp_path / "workdir").exists()  # a dry run writes nothing


@pytest.mark.slow
@pytest.mark.parametrize("name", ["saw", "vpo"])
def test_paper_command_validates_from_an_hf_directory_for_8_devices(
    name, tmp_path, shared, qwen2_tokenizer_dir
):
    """SAW's and VPO's commands without the compile (paper-scale dry runs compile one per engine,
    issue 46: the static engine's in ``test_e2e.py`` (Qwen2.5-Math-1.5B, SAW's model family and
    size), the continuous engine's in ``test_multiprocess.py``; AWPO's above compiles Qwen3-4B,
    VPO's shapes): the config validates for the 8-device mesh, the model read from the directory's
    ``config.json`` has transformers' parameter count, and the longest prompt (ToolRL, maze) is
    measured with the directory's tokenizer, as the dry run does before it compiles."""
    from mojax_test_utils import load_config

    from mojax import models
    from mojax.rl import dry_run
    from mojax.spec import validate
    from mojax.spec.model_config import qwen_config

    flags, hf_dir = dry_run_flags(documented_command(name), tmp_path, shared, qwen2_tokenizer_dir)
    (config_flag,) = [f for f in flags if f.startswith("--config=")]
    assert [f for f in flags if f.startswith("--config.")] == ["--config.dry_run=true"], flags
    path, _, arg = config_flag.removeprefix("--config=").partition(":")
    assert path == f"configs/{name}.py"
    config = load_config(name, arg)
    with config.unlocked():
        config.dry_run = True
    spec = validate(config, num_devices=8)
    assert (spec.mesh.data, spec.mesh.fsdp) == (2, 4) and spec.model.checkpoint == str(hf_dir)
    mc = qwen_config(spec, tokenizer=None)
    assert models.param_count(mc.replace(lora=None)) == transformers_param_count(
        HF_CONFIGS[hf_dir.name]
    )
    prompt_len, how = dry_run.prompt_length(spec)
    assert prompt_len > 0 and not how.startswith("assumed"), how
