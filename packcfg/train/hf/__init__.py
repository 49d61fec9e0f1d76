"""Hugging Face checkpoints in and out of the executor's megatron-core GPTModel.

- `config`: an HF `config.json` <-> the config's `model` section (Bridge's GPTModelProvider names);
  standard library only, so reading settings never imports torch.
- `families`: one weight-mapping table per family (Llama 3/3.1/3.2, Qwen2/2.5, Qwen3), after
  Megatron Bridge's own bridges.
- `weights`: safetensors in and out (never pickles), QKV interleaving, SwiGLU fusion, TP slicing.
- `convert`: import into a built model (this rank's TP slice) and export a full state dict as an HF folder.
- `command`: `packcfg export-hf`.
"""
