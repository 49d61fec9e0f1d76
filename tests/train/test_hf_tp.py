"""HF import under tensor parallelism 2 (torchrun, 2 gloo processes): each rank loads its slice of the
folder's weights, the packed THD forward's vocab-parallel logits (gathered) equal `transformers`' per-
sample logits to 1e-5, and the TP-gathered weights export back to the same tensors.
Control: a TP split of fc1 that cuts [gate; up] as one block (not gate and up separately) must fail.

Run as a worker by torchrun: python tests/train/test_hf_tp.py OUT.pt VARIANT NAME=FOLDER ...
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

if __name__ == "__main__":  # the torchrun worker: make `tests` importable, as harness.py does
    warnings.filterwarnings("ignore")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pytest  # noqa: E402
import torch  # noqa: E402

TP = 2


def _worker(out: Path, variant: str, folders: dict[str, Path]) -> None:
    import torch.distributed as dist

    from packcfg.train.hf import convert
    from packcfg.train.hf.config import read_hf_config
    from packcfg.train.mcore_compat import parallel_state
    from packcfg.train.parallel import distributed
    from tests.train.test_hf_oracle import imported_model, packed_logits, settings_for

    if variant == "fc1_split_as_one_block":
        real = convert.tp_slice

        def plain(name, full, tp, rank):
            if name.endswith("linear_fc1.weight"):
                return full.chunk(tp, dim=0)[rank]
            return real(name, full, tp, rank)

        convert.tp_slice = plain
    dist.init_process_group("gloo")
    results: dict[str, object] = {}
    try:
        with distributed(tp=TP) as layout:
            for name, folder in folders.items():
                settings = settings_for(folder, tp=TP)
                model = imported_model(folder, settings)
                local = packed_logits(model)  # [T, V / TP]
                parts = [torch.empty_like(local) for _ in range(TP)]
                dist.all_gather(
                    parts, local.contiguous(), group=parallel_state.get_tensor_model_parallel_group()
                )
                results[name] = torch.cat(parts, dim=-1)
                state = convert.full_state(model)  # collective: every rank
                if layout.is_main:
                    export = out.parent / f"export_{variant}_{name}"
                    convert.export_hf(state, settings_for(folder), read_hf_config(folder).family, export)
                    results[f"{name}:export"] = str(export)
        if dist.get_rank() == 0:
            torch.save(results, out)
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def folders(hf_models):
    return {name: hf_models[name] for name in ("llama31", "qwen2", "qwen3")}


@pytest.fixture(scope="module")
def hf_models(tmp_path_factory):
    from tests.train import test_hf_oracle

    return test_hf_oracle.hf_models.__wrapped__(tmp_path_factory)


def _run(tmp_path, variant, folders):
    from .cases import run_torchrun

    out = tmp_path / f"{variant}.pt"
    run_torchrun(
        ["tests/train/test_hf_tp.py", str(out), variant, *(f"{n}={f}" for n, (f, _) in folders.items())]
    )
    return torch.load(out, weights_only=True)


@pytest.mark.torchrun
@pytest.mark.slow
def test_tp2_import_forward_and_export_equal_transformers(tmp_path, folders):
    import transformers
    from safetensors.torch import load_file

    from .test_hf_oracle import CONTROL, TOL, hf_logits, max_diff

    results = _run(tmp_path, "none", folders)
    for name, (folder, hf_model) in folders.items():
        assert max_diff(results[name], hf_logits(hf_model)) <= TOL, name
        export = Path(results[f"{name}:export"])
        before, after = (
            load_file(str(folder / "model.safetensors")),
            load_file(str(export / "model.safetensors")),
        )
        assert sorted(before) == sorted(after) and all(torch.equal(before[k], after[k]) for k in before), name
        reloaded = transformers.AutoModelForCausalLM.from_pretrained(str(export)).eval()
        assert max_diff(hf_logits(reloaded), hf_logits(hf_model)) <= TOL, name

    wrong = _run(tmp_path, "fc1_split_as_one_block", {"llama31": folders["llama31"]})
    assert max_diff(wrong["llama31"], hf_logits(folders["llama31"][1])) > CONTROL


if __name__ == "__main__":
    _worker(Path(sys.argv[1]), sys.argv[2], {k: Path(v) for k, v in (a.split("=", 1) for a in sys.argv[3:])})
