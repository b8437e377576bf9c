"""CUDA context and allocator overhead, the fused-CE / offload / LoRA-dropout knobs, and the
context read from a box's recorded `orch check` (orchestrator/sizing/overhead.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from orchestrator.check.record import save_check
from orchestrator.cli import main
from orchestrator.provision.boxes import box_directory, make_private_dir
from orchestrator.sizing import overhead
from orchestrator.sizing.job import JobSpec
from orchestrator.sizing.memory import GIB, estimate_memory
from orchestrator.sizing.resolve import resolve_architecture
from orchestrator.sizing.runtime_stack import HF_EAGER, runtime_stack

ROOT = Path(__file__).resolve().parents[2]


def estimate_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict, str]:
    try:
        main(["estimate", "--json", *args])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else {}), err


def memory(**job: object):
    spec = JobSpec(**job)  # type: ignore[arg-type]
    arch, _ = resolve_architecture(spec)
    return arch, estimate_memory(arch, spec)


def test_driver_decides_lazy_or_eager_context() -> None:
    assert overhead.context_for_driver("535.104.05").gib == overhead.CONTEXT_LAZY_GIB
    assert overhead.context_for_driver("515.43.04").gib == overhead.CONTEXT_LAZY_GIB
    assert overhead.context_for_driver("470.82.01").gib == overhead.CONTEXT_EAGER_GIB
    assert overhead.context_for_driver("not-a-version") is None


def test_context_override_moves_the_total_by_the_difference() -> None:
    _, default = memory(model="gpt2", batch=4, seq=512)
    _, eager = memory(model="gpt2", batch=4, seq=512, cuda_context_gib=1.3)
    delta = eager.total_bytes - default.total_bytes
    assert delta == pytest.approx((1.3 - overhead.DEFAULT_CONTEXT_GIB) * GIB, abs=2)
    assert eager.assumptions["cuda_context_gib"] == 1.3


def test_reserve_is_the_stacks_fraction_of_the_allocated_peak() -> None:
    stack = runtime_stack(None)
    for batch in (2, 32):
        _, m = memory(model="bert-large", batch=batch, seq=128)
        reserve = m.overhead_bytes - stack.context_gib * GIB
        assert reserve == pytest.approx(stack.reserve_fraction * m.allocated_bytes, abs=2)


def test_fused_ce_drops_the_fp32_logits_and_the_loss_phase() -> None:
    arch, plain = memory(model="llama-3-8b", batch=2, seq=2048, grad_checkpointing=True)
    _, fused = memory(model="llama-3-8b", batch=2, seq=2048, grad_checkpointing=True, fused_ce=True)
    logits = 2 * 2048 * arch.head.vocab * 4
    assert plain.activations_bytes - fused.activations_bytes == pytest.approx(logits, abs=2)
    # The loss backward's two fp32 gradients of vocabulary width go too.
    assert plain.phases["loss"] - fused.phases["loss"] > 2 * logits


def test_activation_offload_keeps_two_layers_on_the_gpu() -> None:
    arch, plain = memory(model="llama-2-7b", batch=1, seq=4096, grad_checkpointing=True)
    _, offloaded = memory(
        model="llama-2-7b", batch=1, seq=4096, grad_checkpointing=True, activation_offload=True
    )
    layer_input = 4096 * 4096 * 4  # fp32 residual stream under autocast
    saved = plain.activations_bytes - offloaded.activations_bytes
    assert saved == pytest.approx((arch.stacks[0].layers - 2) * layer_input, rel=1e-6)


def test_activation_offload_moves_every_stage_of_a_hierarchical_model() -> None:
    """Swin's four stages run at 56², 28², 14² and 7² tokens (224 px, patch 4): each layer's
    input is offloaded at its own stage's width and tokens, not the first stage's at --seq."""
    job = {"model": "swin-base", "batch": 8, "grad_checkpointing": True}
    _, plain = memory(**job)
    _, offloaded = memory(**job, activation_offload=True)
    inputs = [8 * tokens * hidden * 4 for tokens, hidden in ((3136, 128), (784, 256), (196, 512))]
    inputs.append(8 * 49 * 1024 * 4)
    layers = (2, 2, 18, 2)
    moved = sum(n * one for n, one in zip(layers, inputs, strict=True)) - 2 * max(inputs)
    assert plain.activations_bytes - offloaded.activations_bytes == pytest.approx(moved, rel=1e-6)


def test_activation_offload_moves_both_towers_of_a_dual_encoder() -> None:
    """CLIP: the image tower's 50 tokens (49 patches + CLS) and the text tower's --seq."""
    job = {"model": "clip-vit-base-patch32", "batch": 8, "seq": 77, "grad_checkpointing": True}
    _, plain = memory(**job)
    _, offloaded = memory(**job, activation_offload=True)
    image, text = 8 * 50 * 768 * 4, 8 * 77 * 512 * 4
    moved = 12 * image + 12 * text - 2 * max(image, text)
    assert plain.activations_bytes - offloaded.activations_bytes == pytest.approx(moved, rel=1e-6)


def test_lora_dropout_counts_whispers_encoder_at_its_1500_frames() -> None:
    """Whisper's encoder always runs 1500 frames (30 s of audio), whatever --seq says."""
    job = {"model": "whisper-small", "batch": 8, "seq": 448, "lora_rank": 8, "precision": "bf16"}
    arch, plain = memory(**job)
    _, dropout = memory(**job, lora_dropout=0.05)
    extra = sum(
        st.layers * 8 * tokens * sum(i for i, _ in st.lora_targets) * (1 + 2)
        for st, tokens in zip(arch.stacks, (1500, 448), strict=True)
    )
    assert dropout.activations_bytes - plain.activations_bytes == extra


def test_lora_dropout_keeps_mask_and_dropped_input() -> None:
    _, plain = memory(model="llama-2-7b", batch=1, seq=1024, lora_rank=8, precision="bf16")
    _, dropout = memory(
        model="llama-2-7b", batch=1, seq=1024, lora_rank=8, precision="bf16", lora_dropout=0.05
    )
    # q and v adapters read h=4096 inputs: a bool mask and a bf16 copy each, on 32 layers.
    extra = 32 * 1024 * 2 * 4096 * (1 + 2)
    assert dropout.activations_bytes - plain.activations_bytes == extra


def test_estimate_states_the_assumption(capsys: pytest.CaptureFixture[str]) -> None:
    code, data, _ = estimate_json(capsys, "--model", "gpt2")
    assert code == 0
    assumed = data["assumptions"]
    assert assumed["cuda_context_gib"] == overhead.DEFAULT_CONTEXT_GIB
    assert "measured" in assumed["cuda_context_basis"]
    assert assumed["stack"] == "hf-eager"
    assert assumed["allocator_reserve_fraction"] == runtime_stack(None).reserve_fraction
    assert assumed["optimizer_implementation"] == "foreach"
    try:
        main(["estimate", "--model", "gpt2", "--cuda-context-gib", "1.3", "--fused-ce"])
    except SystemExit as exc:
        assert not exc.code
    text = capsys.readouterr().out
    assert "1.30 GiB CUDA context (--cuda-context-gib" in text and "fused CE" in text


@pytest.mark.parametrize("value", ["-1", "17", "nan", "lots", "box:Bad_Name"])
def test_bad_context_values_are_usage_errors(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    code, _, err = estimate_json(capsys, "--model", "gpt2", "--cuda-context-gib", value)
    assert code == 2
    assert err.startswith("orch: error:") and "Traceback" not in err


def test_context_from_a_box_check(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = estimate_json(capsys, "--model", "gpt2", "--cuda-context-gib", "box:ctxbox")
    assert code == 2 and "no recorded check" in err and "orch check ctxbox" in err
    directory = make_private_dir(box_directory("ctxbox"))
    gpu = {"index": 0, "name": "Tesla T4", "memory_total_mib": 15360, "driver_version": "470.82.01"}
    save_check(directory, {"box": "ctxbox", "ok": True, "gpus": [gpu]})
    assert (directory / "check.json").stat().st_mode & 0o777 == 0o600
    code, data, _ = estimate_json(capsys, "--model", "gpt2", "--cuda-context-gib", "box:ctxbox")
    assert code == 0
    assert data["assumptions"]["cuda_context_gib"] == overhead.CONTEXT_EAGER_GIB
    assert "ctxbox" in data["assumptions"]["cuda_context_basis"]


def test_measured_peaks_benchmark_meets_its_target() -> None:
    """Every measured peak (published, and the real-H200 jobs in benchmarks/data) within 10 %
    and never more than 5 % under with the shipped constants; each stack's refit fraction is
    what ships (within 0.02)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import memory_peaks

    cases = memory_peaks.load_cases()
    assert len(cases) >= 21
    assert {c.stack for c in cases} == {"hf-eager", "hf-trainer-2022", "litgpt-2023"}
    assert sum(c.measured_allocated is not None for c in cases) >= 7
    for row in memory_peaks.rows(cases):
        assert -0.05 <= row["error"] <= 0.10, (row["label"], row["error"])
    fitted = memory_peaks.fit(cases)
    for name, fraction in fitted.fraction.items():
        assert fraction == pytest.approx(runtime_stack(name).reserve_fraction, abs=0.02)
    assert fitted.context["hf-eager"] / GIB == pytest.approx(HF_EAGER.context_gib, abs=0.01)


def test_published_bare_contexts_are_sourced_and_the_model_does_not_undercut_them() -> None:
    """Every [[context]] figure names a URL and an ISO date; the modelled lazy context (which
    also covers cuBLAS/cuDNN kernels loaded in the first steps) is at least every published
    bare lazy context, and the eager constant is the largest published eager one (within 5 %)."""
    import datetime as dt

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import memory_peaks

    data = memory_peaks.tomllib.loads(memory_peaks.PEAKS.read_text())
    rows = memory_peaks.context_rows(data["context"])
    for raw in data["context"]:
        assert raw["url"].startswith("https://") and raw["unit"] in memory_peaks.UNITS
        dt.date.fromisoformat(raw["date"])
        assert isinstance(raw["lazy"], bool)
    lazy = [r["measured_gib"] for r in rows if r["loading"] == "lazy"]
    eager = [r["measured_gib"] for r in rows if r["loading"] == "eager"]
    assert len(lazy) >= 4 and len(eager) >= 2
    assert max(lazy) <= overhead.CONTEXT_LAZY_GIB
    assert max(eager) == pytest.approx(overhead.CONTEXT_EAGER_GIB, rel=0.05)


def test_orch_check_records_its_report_for_sizing(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from orchestrator.check.nvidia_smi import GpuInventory
    from orchestrator.check.record import driver_versions, load_check
    from orchestrator.check.verify import CheckReport, Expected
    from orchestrator.commands.check import _record

    gpu = GpuInventory(0, "NVIDIA A10G", 23028, "535.183.01", 0, "00000000:00:1E.0", "GPU-1")
    report = CheckReport("b1", "ssh", Expected("A10G", 1, 24), gpus=[gpu])
    _record(SimpleNamespace(directory=tmp_path), report)  # type: ignore[arg-type]
    recorded = load_check(tmp_path)
    assert recorded is not None and driver_versions(recorded) == ["535.183.01"]
    _record(SimpleNamespace(directory=tmp_path / "missing"), report)  # type: ignore[arg-type]
    assert load_check(tmp_path / "missing") is None  # best effort: no crash, nothing written


@pytest.mark.parametrize("value", ["-0.1", "1", "1.5"])
def test_bad_lora_dropout_is_a_usage_error(capsys: pytest.CaptureFixture[str], value: str) -> None:
    code, _, err = estimate_json(
        capsys, "--model", "gpt2", "--lora-rank", "8", "--lora-dropout", value
    )
    assert code == 2 and err.startswith("orch: error: --lora-dropout")
