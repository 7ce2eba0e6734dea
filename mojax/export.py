"""Export a run's checkpoint as a Hugging Face model directory.

::

    python -m mojax.export --workdir=/runs/calc --out=/export/calc            # latest step
    python -m mojax.export --workdir=/runs/calc --step=40 --out=/export/calc-40
    python -m mojax.export --workdir=/runs/calc --config=configs/paretopo.py --out=...  # no config.json

writes ``config.json`` + ``model.safetensors`` (``mojax.models.save_pretrained``),
``generation_config.json`` and the tokenizer (a LoRA run, ``config.lora``: the adapters merged into
the base, ``W + (alpha / r) A B``, and a PEFT adapter directory ``--peft_out`` beside it,
``adapter_config.json`` + ``adapter_model.safetensors``, for ``peft.PeftModel.from_pretrained``), loadable with
``transformers.AutoModelForCausalLM.from_pretrained(out)`` / ``AutoTokenizer.from_pretrained(out)``
(and servable by vLLM).

The run is rebuilt the way the trainer builds it: the resolved config from ``<workdir>/config.json``
(``mojax.infra.logbook.write_config``; ``--config=configs/<name>.py[:arg]`` for runs that did not save one),
the tokenizer and model config from ``mojax.rl.builders`` (``build_tokenizer``,
``build_model_config``), and the params of the latest (or ``--step``) committed orbax checkpoint in
``<workdir>/checkpoints``. Only the params are read (orbax partial restore), never the optimizer
moments, so the export needs host memory for the params alone. The checkpoints are opened
read-only: exporting from the workdir of a running job deletes, moves and writes nothing there
(its unfinished saves stay). Paths are local: a URL (``gs://...``) is refused (``mojax.infra.paths``).

Tokenizer: an HF tokenizer (``tokenizer.path`` a directory, or the checkpoint's) has its files
copied. The task's own sentencepiece vocabulary (``tokenizer.path="build"``, the calculator
default; the run's ``<workdir>/tokenizer.model``) is converted to ``tokenizer.json`` by
``mojax.hf_tokenizer`` (same ids, ChatML chat template) and ``tokenizer.model`` is copied beside it.
The model rows its vocabulary was padded with for sharding are not exported
(``mojax.models.without_padding_rows``): ``vocab_size`` is the tokenizer's.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mojax.spec import RunSpec

CHECKPOINTS = "checkpoints"


def load_config_file(spec: str):
    """The config of ``path.py[:arg]`` (its ``get_config(arg)``), like ``--config`` of mojax.main."""
    path, sep, arg = spec.partition(".py:")
    path = path + ".py" if sep else spec
    if not os.path.isfile(path):
        raise FileNotFoundError(f"--config: no config file at {path!r}")
    mod_spec = importlib.util.spec_from_file_location("mojax_export_config", path)
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return module.get_config(arg) if sep else module.get_config()


def run_config(workdir: str, config_spec: str | None = None):
    """``<workdir>/config.json`` if the run saved one (it holds the run's overrides too), else the
    config of ``config_spec``."""
    from mojax.infra import logbook as log_lib

    saved = os.path.join(workdir, log_lib.CONFIG_FILE)
    if os.path.isfile(saved):
        return log_lib.read_config(saved)
    if config_spec:
        return load_config_file(config_spec)
    raise FileNotFoundError(
        f"--workdir={workdir}: no {log_lib.CONFIG_FILE} in the run directory; pass the run's "
        "--config=configs/<name>.py[:arg] to rebuild it"
    )


def run_tokenizer(spec: RunSpec, workdir: str):
    """The run's tokenizer (``spec``: its ``RunSpec``): its saved self-built ``tokenizer.model``,
    else rebuilt by ``builders.build_tokenizer`` (a self-built one deterministically, into a
    temporary dir)."""
    from mojax import models
    from mojax.rl import builders

    if spec.tokenizer.path != "build":
        return builders.build_tokenizer(spec, None, None, workdir)
    saved = os.path.join(workdir, "tokenizer.model")
    if os.path.isfile(saved):
        return models.load_tokenizer(saved)
    task = spec.build_task()
    splits = builders.load_splits(task, spec)
    return builders.build_tokenizer(spec, task, splits, tempfile.mkdtemp(prefix="mojax_tok_"))


def restore_params(checkpoint_dir: str, model_config, *, step: int | None = None):
    """``(params, step)``: only the params of a committed step (latest by default), on one CPU
    device (orbax partial restore of the ``TrainState``'s ``params``)."""
    import jax
    import orbax.checkpoint as ocp

    from mojax import models
    from mojax import sharding as sharding_lib
    from mojax.infra import checkpoint as ckpt_lib

    if not os.path.isdir(checkpoint_dir):
        raise FileNotFoundError(f"no checkpoint directory {checkpoint_dir}")
    with ckpt_lib.Checkpointer(checkpoint_dir, read_only=True) as ckpt:
        steps = ckpt.all_steps()
    if not steps:
        raise ckpt_lib.CheckpointError(f"no committed checkpoint in {checkpoint_dir}")
    if step is not None and step not in steps:
        raise ckpt_lib.CheckpointError(
            f"--step={step}: not a committed step in {checkpoint_dir}; committed steps: {steps}"
        )
    step = steps[-1] if step is None else int(step)
    cpu = jax.local_devices(backend="cpu")[:1]
    mesh = sharding_lib.make_mesh(1, 1, 1, devices=cpu)
    shardings = models.param_shardings(model_config, mesh, sharding_lib.logical_axis_rules())
    shapes = models.param_shapes(model_config)
    if model_config.lora is not None:  # a LoRA run's checkpoint holds the adapters only
        shapes, shardings = models.lora.split(shapes)[1], models.lora.split(shardings)[1]
    target = jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), shapes, shardings
    )
    restore_args = jax.tree.map(lambda a: ocp.ArrayRestoreArgs(sharding=a.sharding), target)
    args = ocp.args.PyTreeRestore(
        item={"params": target}, restore_args={"params": restore_args}, partial_restore=True
    )
    manager = ocp.CheckpointManager(
        os.path.abspath(checkpoint_dir),
        options=ocp.CheckpointManagerOptions(read_only=True, save_interval_steps=0, create=False),
        item_names=("state",),
    )
    try:
        out = manager.restore(step, args=ocp.args.Composite(state=args))
    except Exception as e:  # noqa: BLE001 - one error naming the step and what is wrong
        raise ckpt_lib.CheckpointError(
            f"checkpoint step {step} in {checkpoint_dir}: cannot read the params for this model "
            f"config: {type(e).__name__}: {e}"
        ) from e
    finally:
        manager.close()
    return out["state"]["params"], step


_HF_MODULES = {
    "q_proj": "self_attn",
    "k_proj": "self_attn",
    "v_proj": "self_attn",
    "o_proj": "self_attn",
    "gate_proj": "mlp",
    "up_proj": "mlp",
    "down_proj": "mlp",
}


def write_merged(model_config, params, out_dir: str, **save_kwargs) -> None:
    """An HF model directory of a LoRA model with its adapters folded in (``W + (alpha / r) A B``,
    QLoRA's base dequantised): ``params`` is the full LoRA tree (base and adapters merged);
    ``save_kwargs`` go to ``mojax.models.save_pretrained`` (``dtype``, ``tokenizer_dir``)."""
    import jax

    from mojax import models
    from mojax.models import lora as lora_lib

    dense = model_config.replace(lora=None)
    shapes = models.param_shapes(dense)
    merged = jax.jit(lambda p: lora_lib.merged_dense(model_config, p, shapes))(params)
    models.save_pretrained(models.QwenModel(dense, merged), out_dir, **save_kwargs)


def peft_tensors(model_config, adapters) -> dict[str, Any]:
    """The adapters as PEFT's ``adapter_model.safetensors`` tensors: for layer ``i`` and projection
    ``m``, ``base_model.model.model.layers.{i}.{self_attn|mlp}.{m}.lora_A.weight [r, in]`` and
    ``...lora_B.weight [out, r]`` (HF's flattened (head, head_dim) order, as ``mojax.models.hf``)."""
    import numpy as np

    r = model_config.lora.rank
    out = {}
    for i in range(model_config.num_layers):
        layer = adapters["layers"] if model_config.scan_layers else adapters[f"layers_{i}"]
        for name, group in _HF_MODULES.items():
            proj = layer.get(group, {}).get(name)
            if proj is None:
                continue
            a, b = np.asarray(proj["lora_a"]), np.asarray(proj["lora_b"])
            if model_config.scan_layers:
                a, b = a[i], b[i]
            prefix = f"base_model.model.model.layers.{i}.{group}.{name}"
            out[f"{prefix}.lora_A.weight"] = np.ascontiguousarray(a.reshape(-1, r).T)
            out[f"{prefix}.lora_B.weight"] = np.ascontiguousarray(b.reshape(r, -1).T)
    return out


def write_peft(model_config, adapters, out_dir: str, base: str, dtype: str | None = None) -> None:
    """A PEFT LoRA adapter directory (``adapter_config.json``, ``adapter_model.safetensors``) that
    ``peft.PeftModel.from_pretrained(base_model, out_dir)`` loads onto the transformers model of
    the base (``base``: its path or name, written as ``base_model_name_or_path``). QLoRA adapters
    were trained against the quantised base: the PEFT pair reproduces them exactly on a base
    loaded from the merged export's dequantised weights, or approximately on the original one."""
    import numpy as np
    from safetensors.numpy import save_file

    lora = model_config.lora
    os.makedirs(out_dir, exist_ok=True)
    tensors = peft_tensors(model_config, adapters)
    if dtype is not None:
        import ml_dtypes  # noqa: F401 - registers bfloat16 with numpy

        tensors = {k: v.astype(np.dtype(dtype)) for k, v in tensors.items()}
    save_file(tensors, os.path.join(out_dir, "adapter_model.safetensors"))
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base,
        "r": lora.rank,
        "lora_alpha": lora.alpha,
        "lora_dropout": lora.dropout,
        "target_modules": sorted(lora.targets),
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "init_lora_weights": True,
        "use_rslora": False,
        "modules_to_save": None,
    }
    with open(os.path.join(out_dir, "adapter_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)


def lora_base(spec: RunSpec, workdir: str, dense_config):
    """The dense weights a LoRA run's adapters sit on (``mojax.rl.warm_start``): the SFT warm start's
    checkpoint, else ``model.checkpoint``, else the seeded random init of the dense model."""
    import jax

    from mojax import models

    if spec.sft.steps > 0:
        return restore_params(os.path.join(workdir, "checkpoints_sft"), dense_config)[0]
    if spec.model.checkpoint:
        return models.load_params(spec.model.checkpoint, dense_config)
    init_key, _ = jax.random.split(jax.random.PRNGKey(spec.seed))  # as create_train_state
    return models.init_params(dense_config, init_key)


def _export_lora(spec: RunSpec, workdir, model_config, adapters, out_dir, peft_out, dtype, hf_dir):
    from mojax.models import lora as lora_lib

    base = lora_base(spec, workdir, model_config.replace(lora=None))
    full = lora_lib.merge(lora_lib.base_from_dense(model_config, base), adapters)
    write_merged(model_config, full, out_dir, dtype=dtype, tokenizer_dir=hf_dir)
    peft_out = peft_out or out_dir.rstrip("/") + "-peft"
    write_peft(model_config, adapters, peft_out, base=_base_label(spec), dtype=dtype)


def _base_label(spec: RunSpec) -> str:
    return spec.model.checkpoint or f"mojax:{spec.model.variant}:seed={spec.seed}"


def generation_config(tokenizer, model_config, spec: RunSpec) -> dict[str, Any]:
    """Greedy by default; the stop / pad / bos ids the sampler uses."""
    eos = tokenizer.eos_token_id if tokenizer is not None else model_config.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer is not None else model_config.pad_token_id
    out = {
        "bos_token_id": getattr(tokenizer, "bos_token_id", None),
        "eos_token_id": eos,
        "pad_token_id": pad if pad is not None else eos,
        "do_sample": False,
        "max_new_tokens": int(spec.rollout.max_response_len),
    }
    return {k: v for k, v in out.items() if v is not None}


def _hf_tokenizer_dir(spec: RunSpec) -> str:
    path = spec.tokenizer.path or spec.model.checkpoint
    return os.path.expanduser(path)


def export(
    workdir: str,
    out_dir: str,
    *,
    step: int | None = None,
    config: Any = None,
    checkpoint_dir: str | None = None,
    dtype: str | None = None,
    peft_out: str | None = None,
) -> dict[str, Any]:
    """Writes the HF model directory ``out_dir`` from the run in ``workdir`` (module docstring).

    Args:
      workdir: the run directory.
      out_dir: where to write (created).
      step: the checkpoint step (default the latest committed one).
      config: the run's config (ConfigDict) or a ``configs/<name>.py[:arg]`` spec; default the run's
        ``config.json``.
      checkpoint_dir: default ``<workdir>/checkpoints``.
      dtype: dtype of the saved tensors (default the params' dtype, ``model.param_dtype``).
      peft_out: a LoRA run's PEFT adapter directory (default ``<out_dir>-peft``).

    Returns:
      ``{"step", "out_dir", "files", "tokenizer"}`` (``tokenizer`` says how it was exported).

    Raises:
      mojax.infra.paths.RemotePathError, mojax.config.ConfigError: a path or a config path key is a URL.
    """
    from mojax import hf_tokenizer, models
    from mojax import spec as spec_lib
    from mojax.infra import paths
    from mojax.infra.workdir import check_paths
    from mojax.rl import builders

    for what, path in (
        ("--workdir", workdir),
        ("--out", out_dir),
        ("--checkpoint_dir", checkpoint_dir),
    ):
        if path is not None:
            paths.local_path(path, what)
    if config is None or isinstance(config, str):
        config = run_config(workdir, config)
    spec = spec_lib.validate(config, num_devices=None)
    check_paths(spec.resolved, workdir)
    tokenizer = run_tokenizer(spec, workdir)
    model_config = builders.build_model_config(spec, tokenizer)
    params, step = restore_params(
        checkpoint_dir or os.path.join(workdir, CHECKPOINTS), model_config, step=step
    )
    hf_dir = _hf_tokenizer_dir(spec) if isinstance(tokenizer, models.HFTokenizer) else None
    if model_config.lora is not None:  # merged weights here, the PEFT adapters beside them
        _export_lora(spec, workdir, model_config, params, out_dir, peft_out, dtype, hf_dir)
    else:
        # a self-built vocabulary's padding rows are dropped: HF and vLLM would sample them
        model = models.without_padding_rows(models.QwenModel(config=model_config, params=params))
        models.save_pretrained(model, out_dir, dtype=dtype, tokenizer_dir=hf_dir)
    if isinstance(tokenizer, models.SentencePieceTokenizer):
        hf_tokenizer.save_hf_tokenizer(
            tokenizer.path, out_dir, model_max_length=model_config.max_position_embeddings
        )
        how = "sentencepiece converted to tokenizer.json (mojax.hf_tokenizer)"
    else:
        how = f"HF tokenizer files copied from {hf_dir}"
    gen_path = os.path.join(out_dir, "generation_config.json")
    gen = {}
    if os.path.isfile(gen_path):  # copied from the HF checkpoint: its own settings win
        with open(gen_path, encoding="utf-8") as f:
            gen = json.load(f)
    for key, value in generation_config(tokenizer, model_config, spec).items():
        gen.setdefault(key, value)
    with open(gen_path, "w", encoding="utf-8") as f:
        json.dump(gen, f, indent=2)
    return {
        "step": step,
        "out_dir": out_dir,
        "files": sorted(os.listdir(out_dir)),
        "tokenizer": how,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mojax.export",
        description="Export a mojax run's checkpoint as a Hugging Face model directory.",
    )
    parser.add_argument("--workdir", required=True, help="the run directory")
    parser.add_argument("--out", required=True, help="the HF model directory to write")
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (default latest)")
    parser.add_argument(
        "--config", default=None, help="configs/<name>.py[:arg], for runs without config.json"
    )
    parser.add_argument("--checkpoint_dir", default=None, help="default <workdir>/checkpoints")
    parser.add_argument("--dtype", default=None, help="saved dtype, e.g. bfloat16")
    parser.add_argument(
        "--peft_out", default=None, help="a LoRA run's PEFT adapter dir (default <out>-peft)"
    )
    a = parser.parse_args(argv)
    from mojax.config import ConfigError
    from mojax.infra.paths import RemotePathError

    try:
        summary = export(
            a.workdir,
            a.out,
            step=a.step,
            config=a.config,
            checkpoint_dir=a.checkpoint_dir,
            dtype=a.dtype,
            peft_out=a.peft_out,
        )
    except (RemotePathError, ConfigError) as e:  # a URL path (mojax.infra.paths)
        print(f"mojax.export: {e}", file=sys.stderr)
        return 2
    print(
        f"exported step {summary['step']} of {a.workdir} to {a.out}: "
        f"{', '.join(summary['files'])}\ntokenizer: {summary['tokenizer']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
