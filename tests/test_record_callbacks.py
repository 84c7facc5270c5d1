"""Lightning and Hugging Face callbacks with the real packages (tiny CPU models, no downloads)."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")


def profiler_steps(trace: Path) -> list[int]:
    with gzip.open(trace, "rt") as f:
        doc = json.load(f)
    names = {e.get("name", "") for e in doc["traceEvents"] if e.get("ph") == "X"}
    return sorted(int(n.split("#")[1]) for n in names if n.startswith("ProfilerStep#"))


@pytest.mark.slow
def test_lightning_callback(tmp_path: Path) -> None:
    pl = pytest.importorskip("lightning.pytorch")
    from torch.utils.data import DataLoader, TensorDataset

    from opscope.record.callbacks import LightningCallback

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(3, 2)

        def training_step(self, batch: list[torch.Tensor], i: int) -> torch.Tensor:
            return self.layer(batch[0]).sum()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = DataLoader(TensorDataset(torch.randn(24, 3)), batch_size=4)  # 6 batches
    run = tmp_path / "pl"
    trainer = pl.Trainer(
        max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
        callbacks=[LightningCallback(run, wait=1, warmup=1, active=2, with_stack=False)],
        default_root_dir=tmp_path,
    )  # fmt: skip
    trainer.fit(Tiny(), data)
    assert profiler_steps(run / "rank0" / "step_000002.pt.trace.json.gz") == [2, 3]
    m = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in m] == list(range(6))
    model = json.loads((run / "model.json").read_text())
    assert model["modules"][1]["path"] == "layer"
    assert model["modules"][1]["param_shapes"] == {"weight": [2, 3], "bias": [2]}


@pytest.mark.slow
def test_hf_callback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    transformers = pytest.importorskip("transformers")
    from opscope.record.callbacks import HFCallback

    cfg = transformers.BertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=16, num_labels=2,
    )  # fmt: skip
    model = transformers.BertForSequenceClassification(cfg)

    class DS(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return 20

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            g = torch.Generator().manual_seed(i)
            return {
                "input_ids": torch.randint(0, 50, (8,), generator=g),
                "labels": torch.tensor(i % 2),
            }

    run = tmp_path / "hf"
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, max_steps=5,
        report_to=[], save_strategy="no", logging_strategy="no", use_cpu=True,
        dataloader_num_workers=0,
    )  # fmt: skip
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=DS(),
        callbacks=[HFCallback(run, wait=1, warmup=1, active=2, with_stack=False)],
    )  # fmt: skip
    trainer.train()
    assert profiler_steps(run / "rank0" / "step_000002.pt.trace.json.gz") == [2, 3]
    m = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in m] == list(range(5))
    # batch size read from the input_ids kwarg of the model's forward
    assert all(abs(x["samples_per_s"] * x["wall_ns"] / 1e9 - 4) < 1e-6 for x in m)
    shapes = {
        x["path"]: x["param_shapes"]
        for x in json.loads((run / "model.json").read_text())["modules"]
    }
    assert shapes["bert.embeddings.word_embeddings"] == {"weight": [50, 16]}
    assert os.environ["HF_HUB_OFFLINE"] == "1"
