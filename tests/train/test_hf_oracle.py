"""Outside oracles for the Hugging Face import and export (no downloads: tiny random models are built
from local `transformers` configs in temporary folders).

(1) `transformers`' forward on each sample alone vs packcfg's packed THD forward of the imported
    weights: logits equal to 1e-5 (fp32) for Llama 3.1 (theta 500000 + llama3 scaling), Llama 3.2
    (tied embeddings, scaling factor 32), Qwen2 (QKV bias) and Qwen3 (q/k norm), all GQA, one pack of
    several samples (long ones, so the low RoPE frequencies that the scaling changes matter).
(3) export -> `transformers` reload -> the same logits as packcfg's model.
Each comes with controls that must fail: softmax scale 1/d, a QKV split that ignores the per-group
interleaving, a wrong RoPE theta, dropped RoPE scaling. TP 2 is in test_hf_tp.py.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from packcfg.train.batches import Sample, pack_thd  # noqa: E402

from .devices import DEVICE, ON_CUDA, on_model_device  # noqa: E402

VOCAB = 320
LENGTHS = (9, 230, 2, 47, 150)  # stored lengths; runtime = length - 1
# fp32 both sides, on the same device; GPU kernels reduce in another order than the CPU's
TOL = 3e-5 if ON_CUDA else 1e-5
CONTROL = 1e-3  # a control must miss by at least 100x the tolerance
FAMILIES = {
    "llama31": (
        "llama",
        dict(
            rope_theta=500000.0,
            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
            max_position_embeddings=16384,
        ),
    ),
    "llama32_tied": (
        "llama",
        dict(
            rope_theta=500000.0,
            rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
            max_position_embeddings=16384,
            tie_word_embeddings=True,
        ),
    ),
    "qwen2": ("qwen2", dict(rope_theta=1000000.0)),
    "qwen3": ("qwen3", dict(rope_theta=1000000.0)),
}  # fmt: skip


@pytest.fixture(scope="module")
def world():
    from packcfg.train.parallel import distributed

    with distributed() as layout:
        yield layout


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory):
    """name -> (folder, transformers model)."""
    from packcfg.train.hf.tiny import make_tiny_hf_model

    out = {}
    for i, (name, (family, overrides)) in enumerate(FAMILIES.items()):
        folder = tmp_path_factory.mktemp(name)
        # initializer_range 0.1 (not 0.02): sharper attention, so a wrong detail moves logits well past TOL
        model = make_tiny_hf_model(family, folder, VOCAB, seed=10 + i, initializer_range=0.1, **overrides)
        out[name] = (folder, model)
    return out


def samples() -> list[Sample]:
    rng = np.random.default_rng(0)
    return [Sample(rng.integers(0, VOCAB, n), np.ones(n, np.int8)) for n in LENGTHS]


@torch.no_grad()
def hf_logits(hf_model) -> torch.Tensor:
    """transformers, one sample at a time, concatenated in pack order."""
    hf_model = hf_model.to(DEVICE)  # the reference runs where packcfg's model runs
    parts = [
        hf_model(torch.as_tensor(s.input_ids[:-1], device=DEVICE)[None]).logits[0]
        for s in samples()
        if s.runtime_length
    ]
    return torch.cat(parts).cpu()


def settings_for(folder, **replace):
    from packcfg.train.settings import ModelSettings

    settings = ModelSettings.from_config(
        {"model": {"hf_path": str(folder), "transformer_impl": "local", "seq_length": 512}}
    )
    return dataclasses.replace(settings, **replace)


def imported_model(folder, settings=None):
    from packcfg.train.hf.convert import load_hf_weights
    from packcfg.train.model import build_model

    model = build_model(settings or settings_for(folder), seed=0)
    load_hf_weights(folder, model)
    return model.eval()


@torch.no_grad()
def packed_logits(model) -> torch.Tensor:
    mb = on_model_device(model, pack_thd(samples()))
    out = model(
        input_ids=mb.tokens, position_ids=mb.position_ids, attention_mask=None, packed_seq_params=mb.thd
    )
    return out[0].cpu()


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return float((a - b).abs().max())


# ---- (1) transformers per sample vs packcfg packed, per family


@pytest.mark.parametrize("name", list(FAMILIES))
def test_packed_forward_of_imported_weights_equals_transformers(world, hf_models, name):
    folder, hf_model = hf_models[name]
    settings = settings_for(folder)
    assert settings.num_query_groups < settings.num_attention_heads  # GQA
    assert len([s for s in samples() if s.runtime_length]) >= 4  # a pack of several samples
    assert max_diff(packed_logits(imported_model(folder, settings)), hf_logits(hf_model)) <= TOL


def test_imported_settings_follow_each_family(hf_models):
    llama, tied = settings_for(hf_models["llama31"][0]), settings_for(hf_models["llama32_tied"][0])
    qwen2, qwen3 = settings_for(hf_models["qwen2"][0]), settings_for(hf_models["qwen3"][0])
    assert (llama.rotary_base, llama.rope_scaling, llama.rope_scaling_factor) == (500000.0, True, 8.0)
    assert (tied.share_embeddings, tied.rope_scaling_factor) == (True, 32.0)
    assert (qwen2.add_qkv_bias, qwen2.qk_layernorm, qwen2.rope_scaling) == (True, False, False)
    assert (qwen3.add_qkv_bias, qwen3.qk_layernorm, qwen3.kv_channels) == (False, True, 16)


def test_control_softmax_scale_one_over_d_fails(world, hf_models):
    from packcfg.train.attention import PackedCoreAttention

    folder, hf_model = hf_models["qwen3"]
    model = imported_model(folder)
    for module in model.modules():
        if isinstance(module, PackedCoreAttention):
            module.softmax_scale = 1.0 / module.head_dim
    assert max_diff(packed_logits(model), hf_logits(hf_model)) > CONTROL


def test_control_qkv_concatenated_without_group_interleaving_fails(world, hf_models, monkeypatch):
    from packcfg.train.hf import convert

    monkeypatch.setattr(convert, "merge_qkv", lambda q, k, v, *shape: torch.cat([q, k, v]))
    folder, hf_model = hf_models["llama31"]
    assert max_diff(packed_logits(imported_model(folder)), hf_logits(hf_model)) > CONTROL


@pytest.mark.parametrize(
    "wrong",
    [dict(rotary_base=10000.0), dict(rope_scaling=False), dict(rope_scaling_factor=4.0)],
    ids=["theta", "scaling_dropped", "scaling_factor"],
)
def test_control_wrong_rope_fails(world, hf_models, wrong):
    folder, hf_model = hf_models["llama31"]
    model = imported_model(folder, settings_for(folder, **wrong))
    assert max_diff(packed_logits(model), hf_logits(hf_model)) > CONTROL


# ---- (3) export -> transformers reload -> same logits


def _perturbed(model):
    """Change every weight, so an export that merely copied the input folder would not pass."""
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g).to(p.device))
    return model


def _export_and_reload(model, folder, out):
    import transformers

    from packcfg.train.hf.config import read_hf_config
    from packcfg.train.hf.convert import export_hf, full_state

    export_hf(full_state(model), settings_for(folder), read_hf_config(folder).family, out, base_folder=folder)
    return transformers.AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()


@pytest.mark.parametrize("name", list(FAMILIES))
def test_exported_folder_reloads_in_transformers_with_the_same_logits(world, hf_models, tmp_path, name):
    folder, _ = hf_models[name]
    model = _perturbed(imported_model(folder))
    reloaded = _export_and_reload(model, folder, tmp_path / "export")
    assert max_diff(packed_logits(model), hf_logits(reloaded)) <= TOL
    original = json.loads((folder / "config.json").read_text())
    exported = json.loads((tmp_path / "export" / "config.json").read_text())
    assert exported["tie_word_embeddings"] == original["tie_word_embeddings"]
    for key in ("max_position_embeddings", "bos_token_id", "eos_token_id"):  # kept from the starting folder
        assert exported.get(key) == original.get(key), key
    assert (tmp_path / "export" / "generation_config.json").read_bytes() == (
        folder / "generation_config.json"
    ).read_bytes()
    assert reloaded.config.rope_parameters == _hf_rope(original)


def _hf_rope(raw):
    import transformers

    return transformers.AutoConfig.for_model(**raw).rope_parameters


def test_control_export_with_plain_qkv_split_fails(world, hf_models, tmp_path, monkeypatch):
    from packcfg.train.hf import convert

    def plain(qkv, heads, groups, head_dim):
        return torch.split(qkv, [heads * head_dim, groups * head_dim, groups * head_dim])

    folder, _ = hf_models["qwen2"]
    model = imported_model(folder)
    monkeypatch.setattr(convert, "split_qkv", plain)
    reloaded = _export_and_reload(model, folder, tmp_path / "export")
    assert max_diff(packed_logits(model), hf_logits(reloaded)) > CONTROL


def test_control_export_without_rope_scaling_fails(world, hf_models, tmp_path, monkeypatch):
    import transformers

    folder, _ = hf_models["llama31"]
    model = imported_model(folder)
    _export_and_reload(model, folder, tmp_path / "export")
    config = json.loads((tmp_path / "export" / "config.json").read_text())
    del config["rope_scaling"]
    (tmp_path / "export" / "config.json").write_text(json.dumps(config))
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "export")).eval()
    assert max_diff(packed_logits(model), hf_logits(reloaded)) > CONTROL


def test_export_round_trip_is_bit_exact(world, hf_models, tmp_path):
    """Import then export without training: every tensor comes back identical, none added or lost."""
    from safetensors.torch import load_file

    for name in ("llama32_tied", "qwen2", "qwen3"):
        folder, _ = hf_models[name]
        _export_and_reload(imported_model(folder), folder, tmp_path / name)
        before, after = (
            load_file(str(folder / "model.safetensors")),
            load_file(str(tmp_path / name / "model.safetensors")),
        )
        if name == "llama32_tied":
            before.pop("lm_head.weight", None)
        assert sorted(before) == sorted(after), name
        assert all(torch.equal(before[k], after[k]) for k in before), name


def test_sharded_folder_written_by_transformers_imports_the_same(world, hf_models, tmp_path):
    """A folder saved by transformers in several shards (with model.safetensors.index.json)."""
    folder, hf_model = hf_models["qwen2"]
    hf_model.save_pretrained(str(tmp_path), max_shard_size="200KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert len(list(tmp_path.glob("model-*.safetensors"))) > 1
    assert max_diff(packed_logits(imported_model(tmp_path)), hf_logits(hf_model)) <= TOL
