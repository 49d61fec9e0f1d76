"""HF folders as users have them: config.json spellings, sharded safetensors, refusals with one-line
messages (pickled weights, unsupported families and RoPE types, a YAML shape that disagrees with the
folder, a foreign export folder), and `packcfg train` -> `packcfg export-hf` from the command line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from packcfg.train.hf.config import HFConfigError, hf_source, model_section, read_hf_config  # noqa: E402

from .cases import REPO_ROOT  # noqa: E402

LLAMA_V4 = {  # a Llama 3.1 config.json as transformers 4 writes it (and as the Hub serves it)
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "tie_word_embeddings": False,
    "hidden_act": "silu",
}  # fmt: skip


def _folder(tmp_path, raw):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(raw))
    return tmp_path


def test_llama31_config_maps_to_bridge_model_keys(tmp_path):
    model = read_hf_config(_folder(tmp_path, LLAMA_V4)).model
    assert model["num_layers"] == 32 and model["num_query_groups"] == 8 and model["kv_channels"] == 128
    assert model["ffn_hidden_size"] == 14336 and model["vocab_size"] == 128256
    assert (model["rotary_base"], model["rope_scaling"], model["rope_scaling_factor"]) == (
        500000.0,
        True,
        8.0,
    )
    assert model["layernorm_epsilon"] == 1e-5 and model["share_embeddings_and_output_weights"] is False


def test_transformers5_spelling_reads_the_same(tmp_path):
    raw = {k: v for k, v in LLAMA_V4.items() if k not in ("rope_theta", "rope_scaling")}
    raw["rope_parameters"] = {**LLAMA_V4["rope_scaling"], "rope_theta": 500000.0}
    assert (
        read_hf_config(_folder(tmp_path, raw)).model
        == read_hf_config(_folder(tmp_path / "v4", LLAMA_V4)).model
    )


def test_qwen_families(tmp_path):
    base = {**LLAMA_V4, "rope_scaling": None, "rope_theta": 1e6}
    qwen2 = read_hf_config(_folder(tmp_path / "q2", {**base, "model_type": "qwen2"})).model
    qwen3 = read_hf_config(_folder(tmp_path / "q3", {**base, "model_type": "qwen3", "head_dim": 64})).model
    assert (qwen2["add_qkv_bias"], qwen2["qk_layernorm"]) == (True, False)
    assert (qwen3["add_qkv_bias"], qwen3["qk_layernorm"], qwen3["kv_channels"]) == (False, True, 64)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"model_type": "mistral"}, "model_type 'mistral' is not supported"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope scaling type 'yarn' is not supported"),
        (
            {"rope_scaling": {**LLAMA_V4["rope_scaling"], "high_freq_factor": 2.0}},
            "high_freq_factor 2.0 is not supported",
        ),
        ({"hidden_act": "gelu"}, "hidden_act 'gelu' is not supported"),
        ({"attention_bias": True}, "attention_bias true is not supported"),
        ({"num_key_value_heads": 5}, "not a multiple of num_key_value_heads"),
    ],
    ids=["family", "yarn", "llama3_non_default", "gelu", "llama_bias", "groups"],
)
def test_unsupported_configs_are_refused_by_name(tmp_path, change, message):
    with pytest.raises(HFConfigError, match=message):
        read_hf_config(_folder(tmp_path, {**LLAMA_V4, **change}))


def test_broken_config_json_names_file_and_line(tmp_path):
    (tmp_path / "config.json").write_text('{\n  "model_type": "llama",\n  oops\n}')
    with pytest.raises(HFConfigError, match=r"config.json:3: not JSON"):
        read_hf_config(tmp_path)


def test_yaml_shape_must_agree_with_the_folder(tmp_path):
    folder = _folder(tmp_path, LLAMA_V4)
    merged = model_section(
        {"model": {"hf_path": str(folder), "num_layers": 32, "tensor_model_parallel_size": 2}}
    )
    assert merged["tensor_model_parallel_size"] == 2 and merged["hidden_size"] == 4096
    with pytest.raises(HFConfigError, match=r"model.hidden_size: 2048 disagrees with .*config.json \(4096\)"):
        model_section({"model": {"hf_path": str(folder), "hidden_size": 2048}})


def test_tp_that_does_not_divide_the_vocabulary_is_refused(tmp_path):
    folder = _folder(tmp_path, {**LLAMA_V4, "vocab_size": 1841})
    with pytest.raises(HFConfigError, match=r"tensor_model_parallel_size: 2 does not divide .* \(1841\)"):
        model_section({"model": {"hf_path": str(folder), "tensor_model_parallel_size": 2}})


def test_hf_source_is_hf_path_or_a_pretrained_checkpoint_with_config_json(tmp_path):
    folder = _folder(tmp_path / "hf", LLAMA_V4)
    assert hf_source({"checkpoint": {"pretrained_checkpoint": str(folder)}}) == folder
    assert (
        hf_source({"checkpoint": {"pretrained_checkpoint": str(tmp_path)}}) is None
    )  # a megatron checkpoint
    with pytest.raises(
        HFConfigError,
        match="model.hf_path: .* is not a local Hugging Face folder .no config.json.; .* downloads nothing",
    ):
        hf_source({"model": {"hf_path": str(tmp_path / "nowhere")}})


# ---- weights on disk


def test_pickled_weights_are_refused_without_being_read(tmp_path):
    from packcfg.train.hf.weights import read_safetensors

    marker = tmp_path / "ran"
    # A pickle that would create `marker` if anything unpickled it.
    payload = b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."
    (tmp_path / "pytorch_model.bin").write_bytes(payload)
    with pytest.raises(HFConfigError, match="only pickled weights .*pytorch_model.bin.* safetensors only"):
        read_safetensors(tmp_path)
    assert not marker.exists()


def test_sharded_safetensors_are_read_through_the_index(tmp_path):
    from packcfg.train.hf.weights import read_safetensors, write_safetensors

    tensors = {f"t{i}": torch.full((256,), float(i)) for i in range(5)}
    files = write_safetensors(tensors, tmp_path, shard_bytes=2048)
    assert files[-1] == "model.safetensors.index.json" and len(files) == 4
    back = read_safetensors(tmp_path)
    assert sorted(back) == sorted(tensors) and all(torch.equal(back[k], tensors[k]) for k in tensors)


def test_index_naming_a_file_outside_the_folder_is_refused(tmp_path):
    from packcfg.train.hf.weights import read_safetensors

    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "../x.safetensors"}})
    )
    with pytest.raises(HFConfigError, match="is not a .safetensors file in the folder"):
        read_safetensors(tmp_path)


def test_qkv_interleaving_is_per_query_group():
    from packcfg.train.hf.weights import merge_qkv, split_qkv

    heads, groups, d = 4, 2, 1
    q = torch.tensor([[0.0], [1.0], [2.0], [3.0]])  # heads 0-1 in group 0, 2-3 in group 1
    k, v = torch.tensor([[10.0], [11.0]]), torch.tensor([[20.0], [21.0]])
    qkv = merge_qkv(q, k, v, heads, groups, d)
    assert qkv.flatten().tolist() == [0, 1, 10, 20, 2, 3, 11, 21]  # [q q k v] per group, as megatron
    assert all(torch.equal(a, b) for a, b in zip(split_qkv(qkv, heads, groups, d), (q, k, v), strict=True))


def test_export_refuses_a_folder_it_did_not_write(tmp_path):
    from packcfg.core.atomic import OutputRefused
    from packcfg.train.hf.convert import export_hf

    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(OutputRefused, match="was not written by packcfg"):
        export_hf({}, object(), "llama", out)
    assert (out / "notes.txt").read_text() == "keep me"


def test_export_refuses_weights_that_do_not_fit_the_config(tmp_path):
    """A Llama-trained checkpoint exported under a Qwen3 config (q/k norms missing), or with a wrong
    vocabulary, is refused by name; transformers' own model is the judge of what fits."""
    from packcfg.train.hf.convert import check_fits
    from packcfg.train.hf.tiny import make_tiny_hf_model
    from packcfg.train.hf.weights import read_safetensors

    for family in ("llama", "qwen3"):
        make_tiny_hf_model(family, tmp_path / family, 64, seed=0)
    llama = read_safetensors(tmp_path / "llama")
    llama_config = json.loads((tmp_path / "llama" / "config.json").read_text())
    qwen3_config = json.loads((tmp_path / "qwen3" / "config.json").read_text())
    check_fits(llama, llama_config)  # the folder's own tensors fit its own config
    with pytest.raises(HFConfigError, match=r"no tensor for model\.layers\.0\.self_attn\.[qk]_norm\.weight"):
        check_fits(llama, qwen3_config)
    with pytest.raises(
        HFConfigError,
        match=r"(lm_head|model\.embed_tokens)\.weight has shape \(64, 64\), .* needs \(65, 64\)",
    ):
        check_fits(llama, {**llama_config, "vocab_size": 65})
    with pytest.raises(HFConfigError, match="has no place"):
        check_fits({**llama, "model.extra.weight": llama["model.norm.weight"]}, llama_config)


# ---- the command line: train from an HF folder, export, reload


@pytest.mark.slow
def test_tiny_hf_recipe_trains_from_the_folder_then_export_hf_reloads_in_transformers(tmp_path):
    """recipes/tiny_hf_sft.yaml (shortened) on a tiny Qwen3 from the command line, then export-hf."""
    import os

    import transformers

    from packcfg.train.hf.tiny import make_tiny_hf_model

    from .test_hf_oracle import TOL, hf_logits, imported_model, packed_logits

    hf_dir = tmp_path / "hf"
    make_tiny_hf_model("qwen3", hf_dir, 1841, seed=3, initializer_range=0.1)  # the bundled tokenizer's vocab
    recipe = str(REPO_ROOT / "recipes" / "tiny_hf_sft.yaml")
    overrides = [f"model.hf_path={hf_dir}", "recipe.family=qwen3", "train.train_iters=2", "train.global_batch_size=2",
                 "scheduler.lr_decay_iters=2", "checkpoint.save_interval=2"]  # fmt: skip
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}

    def packcfg(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "packcfg", *args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=600, env=env)  # fmt: skip

    train = packcfg("train", recipe, *overrides, "--nproc-per-node", "1")
    assert train.returncode == 0, train.stderr
    assert f"initial weights from {hf_dir} (Hugging Face qwen3)" in train.stdout
    export = packcfg("export-hf", recipe, *overrides, "--out", "export")
    assert export.returncode == 0, export.stderr
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "export")).eval()

    # The exported weights are the trained ones: packcfg's model loaded from the checkpoint agrees.
    from packcfg.train.checkpoint import load_weights, resolve_checkpoint
    from packcfg.train.parallel import distributed

    with distributed() as layout:
        model = imported_model(hf_dir)
        start = packed_logits(model)
        load_weights(resolve_checkpoint(tmp_path / "runs" / "tiny_hf_sft" / "checkpoints"), layout, model)
        trained = packed_logits(model.eval())
    assert float((trained - start).abs().max()) > 1e-3  # training changed the weights
    assert float((trained - hf_logits(reloaded)).abs().max()) <= TOL

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    again = packcfg("export-hf", recipe, *overrides, "--out", "mine")
    assert (
        again.returncode == 2 and "refusing to overwrite" in again.stderr and "Traceback" not in again.stderr
    )
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_bf16_master_weights_get_the_folders_fp32_values(tmp_path):
    """With bf16 the optimizer updates fp32 master copies made before loading: they must hold the folder's
    full-precision weights (not the random init, not bf16-rounded copies)."""
    from packcfg.train.hf.convert import load_hf_weights
    from packcfg.train.hf.tiny import make_tiny_hf_model
    from packcfg.train.hf.weights import merge_qkv
    from packcfg.train.model import build_model
    from packcfg.train.optim import MasterWeights
    from packcfg.train.parallel import distributed

    from .test_hf_oracle import settings_for

    hf = make_tiny_hf_model("llama", tmp_path, 128, seed=4)
    with distributed():
        model = build_model(settings_for(tmp_path), seed=0).bfloat16()
        params = [p for p in model.parameters() if p.requires_grad]
        master = MasterWeights(params)
        load_hf_weights(tmp_path, model, master)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    by_name = dict(zip(names, master.master_params, strict=True))
    attn = hf.model.layers[0].self_attn
    expected_qkv = merge_qkv(attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight, 4, 2, 16)
    got = by_name["decoder.layers.0.self_attention.linear_qkv.weight"].cpu()
    assert got.dtype == torch.float32 and torch.equal(got, expected_qkv.detach())
    assert torch.equal(
        by_name["embedding.word_embeddings.weight"].cpu(), hf.model.embed_tokens.weight.detach()
    )
    assert model.embedding.word_embeddings.weight.dtype == torch.bfloat16
