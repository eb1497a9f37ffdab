"""The bundled sample as training input: hand-written dual views standing in for synthesis, one per
eligible seed, for tests that train without running an engine (the root conftest's `sample`), and
the files every checkpoint a training run publishes must hold."""

from __future__ import annotations

from pathlib import Path

# a folder `SentenceTransformer.save` writes, plus how it was trained (dualview.json)
CHECKPOINT_FILES = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "modules.json",
                    "1_Pooling/config.json", "sentence_bert_config.json", "config_sentence_transformers.json",
                    "dualview.json"}


def fixture_instruction(seed: dict) -> str:
    """A test fixture standing in for synthesis: ask for the target's topic, exclude the old positive's."""
    return (f"Only passages like '{seed['instruction_negatives'][0]['title']}' are relevant; "
            f"ones like '{seed['positives'][0]['title']}' are not.")


def write_sample_views(folder: Path) -> tuple[str, str]:
    """(seeds, dual views): the bundled seeds, and one fixture dual view per seed with an instruction
    and instruction negatives, written to `folder`/dual_views.parquet."""
    import pyarrow as pa

    from dualview_core import sample
    from dualview_core.contracts import DUAL_VIEW_ROW
    from dualview_core.method.dual_view import make_dual_view
    from dualview_core.storage.tables import write_table
    from dualview_core.data.loading import read_seeds

    seeds = read_seeds(sample.seeds_path()).seeds.to_pylist()
    views = [make_dual_view(s, fixture_instruction(s), prompt_version="fixture", model_id="hand-written")
             for s in seeds if s["has_instruction"] and s["instruction_negatives"]]
    path = str(Path(folder) / "dual_views.parquet")
    write_table(path, pa.Table.from_pylist(views, schema=DUAL_VIEW_ROW), DUAL_VIEW_ROW)
    return sample.seeds_path(), path
