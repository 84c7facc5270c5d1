"""The one model-code rule (opscope.model.usercode) on the path forms real traces carry."""

from __future__ import annotations

import pytest

from opscope.model.usercode import is_model_file


@pytest.mark.parametrize(
    ("path", "model"),
    [
        ("model.py", True),
        ("/home/me/proj/train.py", True),
        ("torch/nn/modules/linear.py", False),
        ("/usr/lib/python3.11/site-packages/torch/nn/modules/linear.py", False),
        ("/opt/venv/lib/python3.12/site-packages/transformers/models/bert/modeling_bert.py", True),
        ("threading.py", False),
        ("/usr/lib/python3.11/threading.py", False),
        ("<string>", False),
        # torch.compile's generated modules (Inductor's cache), as a recorded H200 trace has them
        (
            "/tmp/torchinductor_root/s4/cs46hfjacvvndposrkjdagimxjyt6rs7hnr6xqf7mkvvwv5nuhmg.py",
            False,
        ),
        ("/home/me/.cache/torchinductor_me/ab/cabc.py", False),
        ("/tmp/cache/inductor_cache/xy/cxy.py", False),
    ],
)
def test_model_file(path: str, model: bool) -> None:
    assert is_model_file(path) is model
