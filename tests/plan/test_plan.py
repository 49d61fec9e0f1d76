"""`packcfg plan`: proposals lint clean, infeasible requests say why in one line, the FLOP and memory
model's behaviour, --apply's output rule, JSON, and the import cost."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from packcfg.cli import main
from packcfg.core.diagnostics import Severity
from packcfg.lint.engine import lint_config
from packcfg.plan.estimate import GIB, Hardware, Layout, PackProfile, Precision, estimate, memory, step_flops
from packcfg.plan.search import Request, plan_config
from packcfg.plan.shape import ModelShape

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "recipes/tiny_cpu_sft.yaml"
DPO = REPO / "recipes/tiny_cpu_dpo.yaml"
L8B = REPO / "recipes/llama3_8b_packed_sft.yaml"
L70B = REPO / "recipes/llama3_70b_packed_sft_cp2.yaml"
VOCAB = "++model.vocab_size=128256"


@pytest.fixture(scope="module")
def long_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tokenized JSONL with a long-tailed length mix up to 3900 tokens (what SFT sets look like)."""
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    lengths = np.clip(rng.lognormal(6.3, 0.9, 3000).astype(int) + 8, 8, 3900)
    path.write_text("".join(json.dumps({"input_ids": [1] * int(n)}) + "\n" for n in lengths))
    return path


def _errors(files: list[Path], overrides: list[str]) -> list[str]:
    return [f"{d.code} {d.message}" for d in lint_config(files, overrides) if d.severity == Severity.ERROR]


@pytest.mark.parametrize(
    ("config", "overrides", "request_kw"),
    [
        (TINY, [], {"gpus": 2}),
        (TINY, [], {"gpus": 8, "gpus_per_node": 4}),
        (DPO, [], {"gpus": 4}),
        (L8B, [VOCAB], {"gpus": 8}),
        (L8B, [VOCAB], {"gpus": 16, "gpus_per_node": 8}),
        (L70B, [VOCAB], {"gpus": 64, "gpus_per_node": 8}),
    ],
)
def test_every_proposal_lints_clean(
    config: Path, overrides: list[str], request_kw: dict, long_data: Path, tmp_path: Path
) -> None:
    data = long_data if config in (L8B, L70B) else None
    result = plan_config([config], overrides, Request(top=8, data=data, **request_kw))
    assert result.infeasible is None
    assert result.proposals
    for proposal in result.proposals:
        # in-process, as the planner checks, and through the override file --apply writes
        assert _errors([config], [*overrides, *proposal.override_args()]) == []
        from packcfg.plan.report import override_yaml

        out = tmp_path / f"p{proposal.rank}.yaml"
        out.write_text(override_yaml(proposal, str(config)))
        assert _errors([config, out], overrides) == []
        lay = proposal.estimate.layout
        assert lay.tp * lay.cp * lay.pp * lay.dp == result.gpus
        assert lay.global_batch_size % lay.dp == 0
        assert proposal.estimate.fits


def test_proposals_are_ranked_by_real_tokens_per_second(long_data: Path) -> None:
    result = plan_config([L8B], [VOCAB], Request(gpus=8, data=long_data, top=20))
    speeds = [p.estimate.tokens_per_second for p in result.proposals]
    assert speeds == sorted(speeds, reverse=True)
    budget = 80 * GIB * 0.9
    assert all(p.estimate.memory["total"] <= budget for p in result.proposals)


def test_less_memory_per_gpu_forces_more_sharding(long_data: Path) -> None:
    small = plan_config(
        [L8B], [VOCAB], Request(gpus=8, data=long_data, hardware=Hardware(gpu_memory_bytes=24 * GIB))
    )
    assert small.proposals
    for p in small.proposals:
        lay = p.estimate.layout
        assert lay.tp * lay.pp > 1 or p.estimate.layout.recompute == "full"
        assert p.estimate.memory["total"] <= 24 * GIB * 0.9


def test_nothing_fits_is_one_line_and_exit_1(long_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", str(L70B), VOCAB, "--gpus", "8", "--gpu-memory", "24GiB", "--data", str(long_data)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert len(err) == 1
    assert "nothing fits in 24 GiB per GPU" in err[0] and "smallest estimate" in err[0]
    args = ["plan", str(L70B), VOCAB, "--gpus", "8", "--gpu-memory", "24GiB", "--data", str(long_data)]
    assert main([*args, "--format", "json"]) == 1
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert doc["proposals"] == [] and doc["infeasible"] in out.err


def test_gpu_count_not_divisible_is_one_line(long_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "plan",
        str(L8B),
        VOCAB,
        "--data",
        str(long_data),
        "--gpus",
        "6",
        "--tp",
        "4",
        "--cp",
        "1",
        "--pp",
        "1",
    ]
    code = main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1
    assert (
        err[0]
        == "packcfg plan: no proposal: no layout on 6 GPUs passes: 6 GPUs not divisible by TP*CP*PP = 4"
    )
    code = main(["plan", str(TINY), "--gpus", "12", "--gpus-per-node", "8"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "not a whole number of nodes" in err[0]


def test_tp_that_does_not_divide_the_heads_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", str(TINY), "--gpus", "8", "--tp", "8", "--cp", "1", "--pp", "1"])
    err = capsys.readouterr().err
    assert code == 1
    assert "model.num_attention_heads 4 not divisible by TP 8" in err


def test_bad_input_is_exit_2_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(tmp_path / "missing.yaml")]) == 2
    assert main(["plan", str(L8B), "--data", str(tmp_path / "none.jsonl")]) == 2
    data = tmp_path / "d.jsonl"
    data.write_text('{"input_ids": [1, 2, 3]}\n')
    assert main(["plan", str(L8B), "--data", str(data)]) == 2  # no vocab_size: named
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3
    assert "model.vocab_size: not set" in err[2]


def test_attention_flops_follow_the_samples_not_the_pack() -> None:
    shape = ModelShape(2, 64, 192, 4, 2, 16, 2048)

    def profile(lengths: list[int]) -> PackProfile:
        return PackProfile(
            512, 1, 1, len(lengths), sum(lengths), sum(lengths), float(sum(n * n for n in lengths)), 1.0
        )

    one, many = profile([512]), profile([64] * 8)
    total_one, attn_one = step_flops(shape, one, "none")
    total_many, attn_many = step_flops(shape, many, "none")
    # causal QK^T and AV: 2 x q_size x L^2 per layer forward, x3 for forward and backward
    assert attn_one == 3 * 2 * shape.q_size * 512**2 * shape.num_layers
    assert attn_many == attn_one / 8
    assert total_one - attn_one == total_many - attn_many  # dense work: the same 512 tokens
    assert step_flops(shape, one, "full")[0] == total_one * 4 / 3


def test_memory_parts_follow_the_parallel_layout() -> None:
    shape = ModelShape(32, 4096, 14336, 32, 8, 128, 128256)
    prec = Precision(bf16=True, grad_reduce_in_fp32=True, distributed_optimizer=True)
    base = Layout(tp=1, cp=1, pp=1, dp=8, pack_size=4096, pad_seq_to_mult=1, global_batch_size=64)
    mem, counts = memory(shape, base, prec)
    params = shape.total_params()
    assert counts["params"] == params
    assert mem["weights"] == 2 * params and mem["gradients"] == 4 * params
    assert mem["optimizer"] == pytest.approx(12 * params / 8)  # Megatron-LM: 6 + 12/DP bytes per parameter
    tp2, _ = memory(shape, Layout(2, 1, 1, 4, 4096, 2, 64), prec)
    assert tp2["activations"] == pytest.approx(mem["activations"] / 2, rel=0.01)  # SP: all of it split
    full, _ = memory(shape, Layout(1, 1, 1, 8, 4096, 1, 64, "full"), prec)
    assert full["activations"] < mem["activations"] / 5
    cp2, _ = memory(shape, Layout(1, 2, 1, 4, 4096, 4, 64), prec)
    assert cp2["activations"] == pytest.approx(mem["activations"] / 2, rel=0.01)


def test_bubble_shrinks_with_more_microbatches() -> None:
    shape = ModelShape(32, 4096, 14336, 32, 8, 128, 128256)
    prof = PackProfile(4096, 1, 100, 800, 380000, 380000, 8e8, 0.93)
    prec, hw = Precision(), Hardware()
    few = estimate(shape, Layout(1, 1, 4, 2, 4096, 1, 8), prof, prec, hw)
    many = estimate(shape, Layout(1, 1, 4, 2, 4096, 1, 64), prof, prec, hw)
    assert few.bubble_fraction == pytest.approx(3 / 7)
    assert many.bubble_fraction == pytest.approx(3 / 35)


def test_apply_writes_an_override_file_and_never_over_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan.yaml"
    assert main(["plan", str(TINY), "--gpus", "2", "--apply", "3", "--output", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("# packcfg plan: proposal 3")
    assert main(["lint", str(TINY), "-c", str(out)]) == 0
    before = out.read_text()
    capsys.readouterr()
    assert main(["plan", str(TINY), "--gpus", "2", "--apply", "1", "--output", str(out)]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    assert out.read_text() == before
    assert main(["plan", str(TINY), "--gpus", "2", "--apply", "1", "--output", str(out), "--force"]) == 0
    assert out.read_text().startswith("# packcfg plan: proposal 1")
    # never over the config itself, --force or not
    assert main(["plan", str(TINY), "--apply", "1", "--output", str(TINY), "--force"]) == 2
    assert main(["plan", str(TINY), "--apply", "99"]) == 2
    assert not list(tmp_path.glob(".*.tmp"))


def test_json_names_its_assumptions(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["plan", str(TINY), "--gpus", "2", "--format", "json", "--peak-tflops", "1.5", "--mfu", "0.3"])
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["assumptions"]["peak_tflops"] == 1.5 and doc["assumptions"]["mfu"] == 0.3
    assert doc["model"]["parameters"] == 360768
    first = doc["proposals"][0]
    assert {"tp", "cp", "pp", "memory_gib", "tokens_per_second", "packing_efficiency", "overrides"} <= set(
        first
    )


def test_plan_imports_no_torch(repo_root: Path) -> None:
    code = (
        "import sys; from packcfg.cli import main; rc = main(['plan', '--gpus', '2', '--top', '1']);"
        "bad = [m for m in ('torch', 'megatron') if m in sys.modules]; print(bad); raise SystemExit(rc)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=repo_root, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_core_never_imports_the_plan_flow(repo_root: Path) -> None:
    for path in (repo_root / "packcfg/core").rglob("*.py"):
        assert "packcfg.plan" not in path.read_text(), path


def test_vocab_padding_follows_the_engine() -> None:
    """The executor builds the vocabulary as given (TP must divide it); Bridge with should_pad_vocab pads it to
    a multiple of make_vocab_size_divisible_by x TP (Megatron-LM's _vocab_size_with_padding)."""
    from packcfg.plan.shape import shape_from_config

    model = {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 2049}
    plain = shape_from_config({"model": model})
    assert plain.padded_vocab(2) == 2049
    assert "model.vocab_size 2049 not divisible by TP 2 (not padded)" in plain.tp_problems(2)
    bridge = {"model": {**model, "should_pad_vocab": True}, "launch": {"engine": "bridge"}}
    padded = shape_from_config(bridge)
    assert (padded.padded_vocab(1), padded.padded_vocab(2), padded.padded_vocab(4)) == (2176, 2304, 2560)
    assert padded.tp_problems(2) == []
    assert padded.embedding_params(2) == 2304 // 2 * 64


def test_packing_efficiency_is_the_planners(long_data: Path) -> None:
    """Each proposal's packing efficiency and pack count are what packcfg.packing.plan() gives for the data's
    lengths at that pack size and pad_seq_to_mult."""
    from packcfg.core.config import load_config
    from packcfg.packing import plan
    from packcfg.plan.search import sample_lengths

    result = plan_config([L8B], [VOCAB], Request(gpus=8, data=long_data, top=5))
    lengths = sample_lengths(load_config([L8B], [VOCAB]), long_data)
    assert len(lengths) == 3000 == result.samples
    for p in result.proposals:
        lay = p.estimate.layout
        stats = plan(lengths, lay.pack_size, align=lay.pad_seq_to_mult, seed=1234).stats
        assert (p.profile.packs, p.profile.efficiency) == (stats["packs"], stats["efficiency"])
        aligned = -(-lengths // lay.pad_seq_to_mult) * lay.pad_seq_to_mult
        assert p.profile.sum_sq_lengths == float((aligned.astype(float) ** 2).sum())


def test_samples_longer_than_the_config_pack_need_samples_per_step(
    long_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Lengths are read whole (no sample cut at the config's pack size); a pack size that cannot hold the
    longest sample gives no samples per step, so the request must say it."""
    assert main(["plan", str(TINY), "--data", str(long_data)]) == 2
    assert "give --samples-per-step N" in capsys.readouterr().err
    result = plan_config([TINY], [], Request(gpus=2, data=long_data, samples_per_step=64))
    assert result.proposals
    for p in result.proposals:
        assert p.profile.pack_size >= 3900
        assert p.estimate.samples_per_step == pytest.approx(64, rel=0.5)
        assert _errors([TINY], p.override_args()) == []


@pytest.mark.parametrize(
    ("config", "words", "message"),
    [
        (REPO / "recipes/llama3_8b_lora_packed.yaml", [VOCAB], "peft: packcfg plan models full-parameter"),
        (REPO / "recipes/llama32_1b_sft_bridge.yaml", [], "add --recipe llama32_1b_sft_config"),
        (REPO / "recipes/qwen25_vl_7b_in_batch_sft.yaml", [], "dataset.enable_offline_packing: not true"),
    ],
)
def test_configs_it_does_not_model_are_named(
    config: Path, words: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", str(config), *words]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_a_bridge_recipe_base_gives_the_shape() -> None:
    one_b = REPO / "recipes/llama32_1b_sft_bridge.yaml"
    result = plan_config([one_b], ["++recipe.base=llama32_1b_sft_config"], Request(gpus=2, top=3))
    assert result.shape.total_params() == 1_235_814_400 and result.shape.tied_embeddings
    for p in result.proposals:
        assert _errors([one_b], ["++recipe.base=llama32_1b_sft_config", *p.override_args()]) == []


def test_a_config_without_packed_paths_still_plans(tmp_path: Path) -> None:
    """Planning writes no packs: a config that names no packed output path is planned from --data."""
    config = tmp_path / "exp.yaml"
    config.write_text(
        "model: {num_layers: 2, hidden_size: 64, num_attention_heads: 4, vocab_size: 128}\n"
        "dataset: {enable_offline_packing: true, offline_packing_specs: {packed_sequence_size: 64}}\n"
        "train: {micro_batch_size: 1, global_batch_size: 4}\n"
    )
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"input_ids": [1] * n}) + "\n" for n in (5, 9, 30, 41, 17, 60)))
    result = plan_config([config], [], Request(gpus=2, data=data))
    assert result.samples == 6 and result.proposals
    assert set(tmp_path.iterdir()) == {data, config}


@pytest.mark.parametrize(
    "shape",
    [
        ModelShape(32, 4096, 14336, 32, 8, 128, 128256),  # Llama 3 8B
        ModelShape(80, 8192, 28672, 64, 8, 128, 128256),  # Llama 3 70B
        ModelShape(24, 2048, 8192, 16, 16, 128, 50304, gated_linear_unit=False),  # a GPT-style MHA layer
    ],
)
def test_activations_stay_near_megatron_lms_formula(shape: ModelShape) -> None:
    """Megatron-LM's compute_activation_memory (theoretical_memory_usage.py): s*b*h*(18 + 4f/h) bytes per
    layer with SP, over TP. The itemised count here (q/k/v, GQA, gated MLP, norms) stays within 15% of it."""
    from packcfg.plan.estimate import activation_bytes_per_token_layer

    for tp in (1, 2, 8):
        layout = Layout(tp, 1, 1, 1, 4096, 1, 8)
        ours = activation_bytes_per_token_layer(shape, layout, Precision(bf16=True))
        theirs = shape.hidden_size * (18 + 4 * shape.ffn_hidden_size / shape.hidden_size) / tp
        assert ours == pytest.approx(theirs, rel=0.15)
