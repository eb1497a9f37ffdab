"""A backbone whose architecture is its repository's own code, as gte-multilingual-mlm-base's is:
refused without trust_remote_code, trained with it, and its checkpoint evaluated with nothing more.

The model here is a tiny BERT declared under a model type transformers does not know, with its
configuration and modeling code in the folder and an `auto_map` naming them: the layout a hub
repository with custom code has. The named backbones themselves live on the hub (no network here).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from dualview_core.config import MixtureConfig, TrainingConfig
from dualview_core.model import load_model, trained_with_remote_code
from tasks.training.worker import run

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONFIGURATION = '''from transformers import BertConfig


class TinyDvConfig(BertConfig):
    model_type = "tiny-dv"
'''
MODELING = '''from transformers import BertModel

from .configuration_tiny_dv import TinyDvConfig


class TinyDvModel(BertModel):
    config_class = TinyDvConfig
'''


@pytest.fixture(scope="module")
def custom_code_model(tmp_path_factory) -> Path:
    """A folder like a hub repository with custom code: config.json's auto_map names the classes in
    configuration_tiny_dv.py and modeling_tiny_dv.py; MiniLM's tokenizer."""
    import torch
    from transformers import BertConfig, BertModel

    from dualview_core.model import resolve_model

    folder = tmp_path_factory.mktemp("custom") / "tiny-dv"
    folder.mkdir()
    minilm = Path(resolve_model("minilm"))
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (minilm / name).is_file():
            shutil.copy(minilm / name, folder / name)
    torch.manual_seed(0)
    bert = BertModel(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                intermediate_size=64, max_position_embeddings=128))
    bert.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    config |= {"model_type": "tiny-dv", "architectures": ["TinyDvModel"],
               "auto_map": {"AutoConfig": "configuration_tiny_dv.TinyDvConfig", "AutoModel": "modeling_tiny_dv.TinyDvModel"}}
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    (folder / "configuration_tiny_dv.py").write_text(CONFIGURATION)
    (folder / "modeling_tiny_dv.py").write_text(MODELING)
    return folder


def test_custom_code_is_refused_unless_trusted(custom_code_model):
    with pytest.raises(ValueError, match="trust_remote_code"):
        load_model(str(custom_code_model))
    model = load_model(str(custom_code_model), pooling="cls", trust_remote_code=True)
    assert type(model[0].auto_model).__name__ == "TinyDvModel"
    assert model.encode_query(["a query"]).shape == (1, 32)


def test_a_custom_code_backbone_trains_and_its_checkpoint_loads_with_nothing_more(custom_code_model, sample, tmp_path):
    cfg = TrainingConfig(mixture=MixtureConfig(name="all-dv"), model=str(custom_code_model), trust_remote_code=True,
                         pooling="cls", batch_size=2, max_steps=2, max_length=32, negatives=1)
    out = tmp_path / "checkpoint"
    result = run(cfg, *sample, str(out))
    assert result.steps == 2
    assert (out / "modeling_tiny_dv.py").is_file() or any(out.rglob("modeling_tiny_dv.py"))  # the code travels
    assert trained_with_remote_code(str(out)) and not trained_with_remote_code(str(custom_code_model))
    trained = load_model(str(out))  # no flag: the checkpoint says it was trained from trusted code
    assert type(trained[0].auto_model).__name__ == "TinyDvModel"
    vectors = trained.encode_document(["a passage", "another passage"])
    assert vectors.shape == (2, 32) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
