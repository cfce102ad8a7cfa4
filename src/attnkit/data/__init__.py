"""Text data: readers for the common formats, tokenizers, batching, splits, a generated corpus and data locations.

Nothing here imports the models: the pipeline hands padded id batches
``{"ids", "lengths", "labels"}`` to whoever trains.
"""

from typing import TYPE_CHECKING

from attnkit._lazy import lazy_exports

_EXPORTS = {
    "LabelVocab": "attnkit.data.batching",
    "TextClassificationDataset": "attnkit.data.batching",
    "bucket_batches": "attnkit.data.batching",
    "collate": "attnkit.data.batching",
    "padding_fraction": "attnkit.data.batching",
    "PackedCollator": "attnkit.data.packing",
    "collate_packed": "attnkit.data.packing",
    "pack_rows": "attnkit.data.packing",
    "packed_fraction": "attnkit.data.packing",
    "FORMATS": "attnkit.data.readers",
    "DataFormatError": "attnkit.data.readers",
    "Example": "attnkit.data.readers",
    "guess_format": "attnkit.data.readers",
    "read_examples": "attnkit.data.readers",
    "read_lines": "attnkit.data.readers",
    "SPECIAL_TOKENS": "attnkit.data.tokenization",
    "encode_batch": "attnkit.data.tokenization",
    "load_tokenizer": "attnkit.data.tokenization",
    "save_tokenizer": "attnkit.data.tokenization",
    "train_tokenizer": "attnkit.data.tokenization",
    "kfold": "attnkit.data.splits",
    "train_val_test_split": "attnkit.data.splits",
    "KeywordExample": "attnkit.data.synthetic",
    "keyword_corpus": "attnkit.data.synthetic",
    "DataNotFoundError": "attnkit.data.locations",
    "data_path": "attnkit.data.locations",
    "data_root": "attnkit.data.locations",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

if TYPE_CHECKING:
    from attnkit.data.batching import (
        LabelVocab,
        TextClassificationDataset,
        bucket_batches,
        collate,
        padding_fraction,
    )
    from attnkit.data.locations import DataNotFoundError, data_path, data_root
    from attnkit.data.packing import PackedCollator, collate_packed, pack_rows, packed_fraction
    from attnkit.data.readers import (
        FORMATS,
        DataFormatError,
        Example,
        guess_format,
        read_examples,
        read_lines,
    )
    from attnkit.data.splits import kfold, train_val_test_split
    from attnkit.data.synthetic import KeywordExample, keyword_corpus
    from attnkit.data.tokenization import (
        SPECIAL_TOKENS,
        encode_batch,
        load_tokenizer,
        save_tokenizer,
        train_tokenizer,
    )
